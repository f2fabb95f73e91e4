// One module: log() writes every line to the logger directory's log.log, which set_logger_dir
// locks, opens and replaces, both under the one State and its mutex; tensorpack's logger.py holds
// both too.
#include "trainpack/utils/logger.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/process_io.h"

namespace trainpack {
namespace logger {
namespace {

namespace fs = std::filesystem;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// Owns the locks of one log directory until released (closing the descriptors releases them).
class DirLock {
 public:
  DirLock() = default;
  DirLock(int dir_fd, int file_fd) : dir_fd_(dir_fd), file_fd_(file_fd) {}
  DirLock(DirLock&& other) noexcept : dir_fd_(other.dir_fd_), file_fd_(other.file_fd_) {
    other.dir_fd_ = other.file_fd_ = -1;
  }
  DirLock& operator=(DirLock&& other) noexcept {
    if (this != &other) {
      reset();
      std::swap(dir_fd_, other.dir_fd_);
      std::swap(file_fd_, other.file_fd_);
    }
    return *this;
  }
  ~DirLock() { reset(); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  // Takes the lock file's descriptor (the directory's stays).
  void adopt_file(int fd) {
    if (file_fd_ >= 0) ::close(file_fd_);
    file_fd_ = fd;
  }
  void reset() {
    if (file_fd_ >= 0) ::close(file_fd_);
    if (dir_fd_ >= 0) ::close(dir_fd_);
    file_fd_ = dir_fd_ = -1;
  }

 private:
  int dir_fd_ = -1;
  int file_fd_ = -1;
};

struct State {
  std::mutex mutex;
  std::map<int, Sink> sinks;
  int next_sink_id = 0;
  std::optional<std::string> logger_dir;
  FilePtr log_file;            // <logger_dir>/log.log, open while logger_dir is set
  std::string message_prefix;  // set_message_prefix
  DirLock lock;  // of logger_dir (the directory and its .trainpack.lock), while it is set
};

State& state() {
  static State s;
  return s;
}

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};

constexpr const char* kActions =
    "'k' (keep), 'd' (delete), 'b' (back up), 'n' (new directory) or 'q' (quit)";

std::string_view base_name(const char* file) {
  std::string_view path(file);
  auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string local_time(const char* format) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::string timestamp() { return local_time("%m%d %H:%M:%S"); }
// The suffix of backed-up and new directories and of backed-up log files (tensorpack's
// _get_time_str).
std::string time_str() { return local_time("%m%d-%H%M%S"); }

std::string lower_strip(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto first = s.find_first_not_of(" \t\r\n\f\v");
  if (first == std::string::npos) return "";
  auto last = s.find_last_not_of(" \t\r\n\f\v");
  return s.substr(first, last - first + 1);
}

// 'k', 'd', 'b', 'n' or 'q' for `action` in either case; otherwise std::invalid_argument.
char parse_action(char action) {
  char c = static_cast<char>(std::tolower(static_cast<unsigned char>(action)));
  if (c == 'k' || c == 'd' || c == 'b' || c == 'n' || c == 'q') return c;
  throw std::invalid_argument(fmt::format(
      "logger::set_logger_dir: unknown action '{}'; the actions are {}",
      std::isprint(static_cast<unsigned char>(action)) ? std::string(1, action)
                                                       : fmt::format("\\x{:02x}", action & 0xff),
      kActions));
}

// os.path.normpath: `a//b/./c/` -> `a/b/c`.
std::string normalise(const std::string& dir) {
  std::string s = fs::path(dir).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s.empty() ? "." : s;
}

// True when `dir` is a directory holding an entry whose name does not start with '.'.
bool has_visible_entry(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    throw std::runtime_error(
        fmt::format("logger::set_logger_dir: cannot list '{}': {}", dir, ec.message()));
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] != '.') return true;
  }
  if (ec) {
    throw std::runtime_error(
        fmt::format("logger::set_logger_dir: cannot list '{}': {}", dir, ec.message()));
  }
  return false;
}

// `base`, or `base-1`, `base-2`... : the first of them that does not exist.
std::string free_name(const std::string& base) {
  std::string name = base;
  for (int i = 1;; ++i) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(name, ec))) return name;
    name = fmt::format("{}-{}", base, i);
  }
}

// One line from fd 0 (without its newline), read unbuffered so that no stdio state is involved.
// `eof` is set when stdin ended (or failed) before a newline.
std::string read_stdin_line(bool* eof) {
  std::string line;
  *eof = false;
  for (;;) {
    char c;
    if (read_some(STDIN_FILENO, &c, 1) <= 0) {
      *eof = true;
      return line;
    }
    if (c == '\n') return line;
    line.push_back(c);
  }
}

// tensorpack's prompt: two warnings, then the question until a non-empty answer.
std::string ask_action(const std::string& dir) {
  TP_LOG_WARN("Log directory {} exists! Use 'd' to delete it. ", dir);
  TP_LOG_WARN(
      "If you're resuming from a previous run, you can choose to keep it.\n"
      "Press any other key to exit. ");
  for (;;) {
    std::fputs("Select Action: k (keep) / d (delete) / q (quit):", stdout);
    std::fflush(stdout);
    bool eof = false;
    std::string answer = lower_strip(read_stdin_line(&eof));
    if (!answer.empty()) return answer;
    if (eof) {
      throw std::runtime_error(fmt::format(
          "logger::set_logger_dir: log directory '{}' exists and stdin ended before an action "
          "was chosen; pass an action: {}",
          dir, kActions));
    }
  }
}

std::vector<std::string> command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::size_t start = 0;
  while (start < all.size()) {
    std::size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return args;
}

[[noreturn]] void fail(const std::string& what, const std::string& path,
                       const std::string& reason) {
  throw std::runtime_error(
      fmt::format("logger::set_logger_dir: cannot {} '{}': {}", what, path, reason));
}

// Closes the log file, releases the directory's lock and forgets the directory.
void detach() {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().log_file.reset();
  state().logger_dir.reset();
  state().lock.reset();
}

// ---- Ownership of a log directory: one run at a time ----
//
// The owner holds flock(LOCK_EX) on the directory itself and on `<dir>/.trainpack.lock` (a hidden
// name: a directory holding only it counts as empty) for as long as the directory is its logger
// directory. The directory's lock is the one that counts: deleting the lock file (a clean-up
// script, a user tidying up) does not let a second run in. The file is kept for its text, "<pid>
// <start time>", which names the holder in the message of a run that finds the directory taken
// (and for runs of older trainpack versions, which lock only the file). The kernel releases both
// locks when the process dies however it dies, so a stale file from a killed run blocks nothing.
// O_CLOEXEC: a program the run executes does not inherit the locks.

constexpr const char* kLockFile = ".trainpack.lock";

// The process id that holds a flock on the file with `st`'s device and inode, from /proc/locks
// ("1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"); 0 when not found.
long flock_holder_pid(const struct stat& st) {
  std::ifstream locks("/proc/locks");
  const std::string id = fmt::format("{:02x}:{:02x}:{}", major(st.st_dev), minor(st.st_dev),
                                     static_cast<unsigned long long>(st.st_ino));
  std::string line;
  while (std::getline(locks, line)) {
    std::istringstream fields(line);
    std::string number, kind, mode, access, pid, file;
    fields >> number >> kind;
    if (kind == "->") fields >> kind;  // a waiter's line: "1: -> FLOCK ..."
    fields >> mode >> access >> pid >> file;
    if (kind == "FLOCK" && file == id) return std::strtol(pid.c_str(), nullptr, 10);
  }
  return 0;
}

// What the holder wrote into the lock file: "process 1234 (since ...)", or, when the file holds
// no process id (deleted and made again since), the holder of the directory's lock.
std::string lock_holder(int fd, const struct stat& dir_st) {
  char buf[256];
  const ssize_t n = fd >= 0 ? ::pread(fd, buf, sizeof buf - 1, 0) : -1;
  std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const auto space = text.find(' ');
  const std::string pid = text.substr(0, space);
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) {
    if (const long holder = flock_holder_pid(dir_st); holder > 0) {
      return fmt::format("process {}", holder);
    }
    return "another process (its process id is not recorded yet)";
  }
  if (space == std::string::npos) return "process " + pid;
  std::string since = text.substr(space + 1);
  for (char& c : since) {
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return fmt::format("process {} (since {})", pid, since);
}

// Takes the locks of log directory `dir` (which exists), or throws std::runtime_error naming the
// directory and the process that holds it.
DirLock lock_directory(const std::string& dir) {
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail("lock (open the directory)", dir, std::strerror(errno));
  DirLock lock(dir_fd, -1);
  struct stat dir_st {};
  if (::fstat(dir_fd, &dir_st) != 0) fail("lock (stat the directory)", dir, std::strerror(errno));
  bool dir_taken = false;
  if (::flock(dir_fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      dir_taken = true;
    } else {
      // A file system that cannot lock a directory (some network file systems emulate flock
      // with write locks, which a directory opened for reading cannot take): the lock file alone
      // guards it, as it did before the directory lock existed.
      TP_LOG_WARN(
          "logger::set_logger_dir: cannot lock the directory {} itself ({}); only its lock file "
          "guards it, so do not delete that file while a run holds it",
          dir, std::strerror(errno));
      lock.reset();
    }
  }

  const std::string path = (fs::path(dir) / kLockFile).string();
  // O_NOFOLLOW: a planted symlink is not followed; O_NONBLOCK: a FIFO does not block the open.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) {
    if (dir_taken) {
      throw std::runtime_error(fmt::format(
          "logger::set_logger_dir: log directory {} is in use by {}; wait for it to finish or "
          "use another directory",
          dir, lock_holder(-1, dir_st)));
    }
    fail("lock (open its lock file '" + path + "')", dir, std::strerror(errno));
  }
  lock.adopt_file(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    fail("lock", dir, "its lock file '" + path + "' is not a regular file; remove it");
  }
  // A hard link planted there would make the owner line below truncate another name's file.
  if (st.st_nlink != 1) {
    fail("lock", dir,
         fmt::format("its lock file '{}' has {} hard links (another name shares the file, which "
                     "the lock would overwrite); remove it",
                     path, static_cast<unsigned long long>(st.st_nlink)));
  }
  const bool file_taken = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
  if (file_taken && errno != EWOULDBLOCK) {
    fail("lock (flock '" + path + "')", dir, std::strerror(errno));
  }
  if (dir_taken || file_taken) {
    throw std::runtime_error(fmt::format(
        "logger::set_logger_dir: log directory {} is in use by {}; wait for it to finish or "
        "use another directory",
        dir, lock_holder(fd, dir_st)));
  }
  const std::string owner = fmt::format("{} {}\n", ::getpid(), local_time("%Y-%m-%d %H:%M:%S %Z"));
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, owner.data(), owner.size(), 0) != static_cast<ssize_t>(owner.size())) {
    // The lock holds all the same; only the message of a second run loses the process id.
  }
  return lock;
}

// log.log's permission bits: read and write for the owner, and read for the group or others
// only where the directory lets them in (read and search) too. Lines can quote what the program
// read (paths, values): a log in a private directory stays private even where the umask is 022.
mode_t log_file_mode(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return 0600;
  mode_t mode = 0600;
  if ((st.st_mode & 0050) == 0050) mode |= 0040;
  if ((st.st_mode & 0005) == 0005) mode |= 0004;
  return mode;
}

// True when `inner` is `outer` or inside it (both made absolute and free of symlinks).
bool contains(const fs::path& outer, const fs::path& inner) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *o != *i) return false;
  }
  return true;
}

// 'b' and 'd' move or delete `dir`: refused when it is `/` or holds the current directory, which
// could not be moved or deleted (the rename would fail with a message that names neither).
void check_movable(const std::string& dir, char action) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(dir, ec);
  if (ec) return;  // the rename or deletion reports it
  const fs::path cwd = fs::current_path(ec);
  const char* verb = action == 'b' ? "back up (move aside)" : "delete";
  if (canonical == canonical.root_path()) {
    throw std::runtime_error(fmt::format(
        "logger::set_logger_dir: will not {} log directory '{}': it is the root directory; use "
        "a directory of its own for the logs",
        verb, dir));
  }
  if (!ec && contains(canonical, cwd)) {
    throw std::runtime_error(fmt::format(
        "logger::set_logger_dir: cannot {} log directory '{}' ({}): it holds the current "
        "directory {}; use a directory of its own for the logs (e.g. train_log/run1), or start "
        "the program from outside it",
        verb, dir, canonical.string(), cwd.string()));
  }
}

// This process's rank when it is one of several training together (torchrun's RANK with
// WORLD_SIZE > 1, or srun's SLURM_PROCID with SLURM_NTASKS > 1); 0 otherwise or when unreadable.
int rank_in_a_group() {
  auto number = [](const char* name) -> long {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return -1;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    return *end == '\0' ? n : -1;
  };
  if (std::getenv("WORLD_SIZE") != nullptr || std::getenv("RANK") != nullptr) {
    return number("WORLD_SIZE") > 1 && number("RANK") > 0 ? static_cast<int>(number("RANK")) : 0;
  }
  return number("SLURM_NTASKS") > 1 && number("SLURM_PROCID") > 0
             ? static_cast<int>(number("SLURM_PROCID"))
             : 0;
}

}  // namespace

void set_message_prefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().message_prefix = std::move(prefix);
}

void log(Level lvl, const char* file, int line, std::string_view message_text) {
  if (static_cast<int>(lvl) < g_level.load(std::memory_order_relaxed)) return;
  std::string prefixed;
  std::string_view message = message_text;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (!state().message_prefix.empty()) {
      prefixed = state().message_prefix;
      prefixed += message_text;
      message = prefixed;
    }
  }
  std::string prefix = fmt::format("[{} @{}:{}]", timestamp(), base_name(file), line);
  const char* tag = "";
  const char* tag_colour = "";
  switch (lvl) {
    case Level::kDebug:
      tag = "DBG ";
      tag_colour = "\033[33m";
      break;
    case Level::kInfo:
      break;
    case Level::kWarning:
      tag = "WRN ";
      tag_colour = "\033[5m\033[31m";
      break;
    case Level::kError:
      tag = "ERR ";
      tag_colour = "\033[4m\033[5m\033[31m";
      break;
  }
  // Checked at every line: stdout may be redirected while the program runs.
  const bool colour = isatty(STDOUT_FILENO) != 0;
  const std::string plain = fmt::format("{} {}{}\n", prefix, tag, message);
  std::lock_guard<std::mutex> lock(state().mutex);
  if (colour) {
    const std::string text = fmt::format("\033[32m{}\033[0m {}{}{}{}\n", prefix, tag_colour, tag,
                                         *tag ? "\033[0m" : "", message);
    write_console(stdout, text);
  } else {
    write_console(stdout, plain);
  }
  if (std::FILE* f = state().log_file.get()) {
    std::fwrite(plain.data(), 1, plain.size(), f);
    std::fflush(f);
  }
  for (auto& entry : state().sinks) entry.second(lvl, message);
}

void set_level(Level lvl) { g_level.store(static_cast<int>(lvl), std::memory_order_relaxed); }
Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }

int add_sink(Sink sink) {
  std::lock_guard<std::mutex> lock(state().mutex);
  int id = state().next_sink_id++;
  state().sinks.emplace(id, std::move(sink));
  return id;
}

void remove_sink(int id) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().sinks.erase(id);
}

std::optional<std::string> get_logger_dir() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().logger_dir;
}

void set_logger_dir(const std::string& dir, std::optional<char> action) {
  if (dir.empty())
    throw std::invalid_argument("logger::set_logger_dir: the directory name is empty");
  // Before any file is opened: a closed stdout must not become log.log (process_io.h).
  protect_process_io();
  if (action) action = parse_action(*action);
  std::string d = normalise(dir);
  if (const int rank = rank_in_a_group(); rank > 0) {
    // Data-parallel training: the directory is the chief's (rank 0): it locks it, acts on it and
    // writes log.log there; another rank only remembers the name.
    std::lock_guard<std::mutex> lock(state().mutex);
    state().logger_dir = d;
    return;
  }

  // Decide first; nothing changes until the action is known and is not 'q'.
  const bool non_empty = has_visible_entry(d);
  std::string answer;  // the action as typed at the prompt
  if (non_empty && !action) {
    if (isatty(STDIN_FILENO) == 0) {
      throw std::invalid_argument(fmt::format(
          "logger::set_logger_dir: log directory '{}' exists and is not empty, and stdin is not "
          "a terminal to ask what to do with it; pass an action: {}",
          d, kActions));
    }
    answer = ask_action(d);
    action =
        answer.size() == 1 && std::string_view("kdbn").find(answer[0]) != std::string_view::npos
            ? answer[0]
            : 'q';
  }
  if (non_empty && *action == 'q') {
    throw std::runtime_error(fmt::format(
        "logger::set_logger_dir: log directory '{}' exists and is not empty; quit as asked ({}). "
        "To use it, pass 'k' (keep), 'd' (delete), 'b' (back up to '{}.<MMDD-HHMMSS>') or 'n' "
        "(use a new directory '{}.<MMDD-HHMMSS>')",
        d, answer.empty() ? std::string("action 'q'") : fmt::format("answer '{}'", answer), d, d));
  }

  if (non_empty && (*action == 'b' || *action == 'd')) check_movable(d, *action);

  // Close the previous log.log and release its lock first, so that its directory may be
  // deleted, moved or taken again.
  detach();
  std::error_code ec;
  if (non_empty) {
    switch (*action) {
      case 'b': {
        // Held while the directory is moved: a directory another run holds is never moved.
        const DirLock old = lock_directory(d);
        const std::string backup = free_name(d + "." + time_str());
        fs::rename(d, backup, ec);
        if (ec) fail("back up (rename to '" + backup + "')", d, ec.message());
        // The backup is nobody's log directory: no lock file of ours is left in it.
        ::unlink((fs::path(backup) / kLockFile).c_str());
        TP_LOG_INFO("Directory '{}' backuped to '{}'", d, backup);
        break;
      }
      case 'd': {
        const DirLock old = lock_directory(d);  // a directory another run holds is never deleted
        fs::remove_all(d, ec);
        if (ec) fail("delete", d, ec.message());
        break;
      }
      case 'n':
        d = free_name(d + "." + time_str());
        TP_LOG_INFO("Use a new log directory {}", d);
        break;
      default:  // 'k'
        break;
    }
  }

  if (fs::exists(d, ec) && !fs::is_directory(d, ec)) fail("use", d, "it is not a directory");
  fs::create_directories(d, ec);
  if (ec) fail("create", d, ec.message());
  // Taken before log.log is touched: the log of a run that holds the directory stays as it is.
  DirLock owned = lock_directory(d);

  const std::string log_path = (fs::path(d) / "log.log").string();
  if (fs::exists(fs::symlink_status(log_path, ec))) {
    const std::string backup = free_name(log_path + "." + time_str());
    fs::rename(log_path, backup, ec);
    if (ec) fail("back up (rename to '" + backup + "')", log_path, ec.message());
    TP_LOG_INFO("Existing log file '{}' backuped to '{}'", log_path, backup);
  }
  // A new file (any log.log was moved aside above): O_EXCL|O_NOFOLLOW, so that a file or symlink
  // put there since is not written through.
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            log_file_mode(d));
  if (log_fd < 0) fail("create", log_path, std::strerror(errno));
  FilePtr file(::fdopen(log_fd, "w"));
  if (!file) {
    const int err = errno;
    ::close(log_fd);
    fail("open", log_path, std::strerror(err));
  }
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().log_file = std::move(file);
    state().logger_dir = d;
    state().lock = std::move(owned);
  }
  std::string argv;
  for (const auto& arg : command_line()) argv += (argv.empty() ? "" : " ") + arg;
  TP_LOG_INFO("Argv: {}", argv);
  // The directory is this run's now: what a killed run left half-written goes.
  for (const std::string& name : remove_stale_temporary_files(d)) {
    TP_LOG_INFO("Removed {}, a temporary file left by a process that no longer runs.",
                (fs::path(d) / name).string());
  }
}

void set_logger_dir(const std::string& dir, const std::string& action) {
  if (action.empty()) return set_logger_dir(dir, std::optional<char>());
  if (action.size() != 1) {
    throw std::invalid_argument(
        fmt::format("logger::set_logger_dir: the action must be one character, got '{}'; the "
                    "actions are {}",
                    action, kActions));
  }
  set_logger_dir(dir, std::optional<char>(action[0]));
}

void auto_set_dir(std::optional<char> action, const std::string& name) {
  const auto args = command_line();
  std::string program =
      args.empty() ? std::string() : fs::path(args.front()).filename().stem().string();
  if (program.empty()) program = program_invocation_short_name;
  std::string dir = "train_log/" + program;
  if (!name.empty()) dir += ":" + name;
  set_logger_dir(dir, action);
}

void unset_logger_dir() { detach(); }

}  // namespace logger
}  // namespace trainpack
