// The logger (docs/tensorpack-differences.md #10): set_logger_dir with each action, log.log, the
// console format.
#include "trainpack/utils/logger.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace logger_test {

namespace fs = std::filesystem;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::LogCapture;
using ::testing::MatchesRegex;
using ::testing::Not;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// The names inside `dir`, sorted, less the lock file of the run that owns it.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() != ".trainpack.lock") names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The `MMDD-HHMMSS` suffix for `seconds_ahead` seconds from now.
std::string time_suffix(int seconds_ahead) {
  std::time_t t = std::time(nullptr) + seconds_ahead;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%m%d-%H%M%S", &tm);
  return buf;
}

// Puts `path` (opened with `flags`) on file descriptor `fd` while it lives.
class RedirectFd {
 public:
  RedirectFd(int fd, int replacement) : fd_(fd), saved_(::dup(fd)) {
    std::fflush(stdout);
    EXPECT_GE(saved_, 0);
    EXPECT_GE(::dup2(replacement, fd_), 0);
  }
  ~RedirectFd() {
    std::fflush(stdout);
    ::dup2(saved_, fd_);
    ::close(saved_);
  }
  RedirectFd(const RedirectFd&) = delete;
  RedirectFd& operator=(const RedirectFd&) = delete;

 private:
  int fd_;
  int saved_;
};

// Stdin from /dev/null while it lives: not a terminal, whatever runs the tests.
class StdinFromDevNull {
 public:
  StdinFromDevNull() : null_(::open("/dev/null", O_RDONLY)), redirect_(STDIN_FILENO, null_) {}
  ~StdinFromDevNull() { ::close(null_); }

 private:
  int null_;
  RedirectFd redirect_;
};

// A pseudo-terminal: `slave()` is a terminal; what is written to it is read from `master()`.
class Pty {
 public:
  Pty() {
    master_ = ::posix_openpt(O_RDWR | O_NOCTTY);
    if (master_ < 0 || ::grantpt(master_) != 0 || ::unlockpt(master_) != 0) return;
    const char* name = ::ptsname(master_);
    if (name != nullptr) slave_ = ::open(name, O_RDWR | O_NOCTTY);
  }
  ~Pty() {
    if (slave_ >= 0) ::close(slave_);
    if (master_ >= 0) ::close(master_);
  }
  bool ok() const { return master_ >= 0 && slave_ >= 0; }
  int slave() const { return slave_; }
  // Types `text` on the terminal's keyboard.
  void type(const std::string& text) {
    ASSERT_EQ(::write(master_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  // What was written to the terminal (and its echo of typed text), waiting up to 1 s for it.
  std::string screen() {
    std::string out;
    char buf[4096];
    pollfd p{master_, POLLIN, 0};
    while (::poll(&p, 1, out.empty() ? 1000 : 50) > 0) {
      ssize_t n = ::read(master_, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int master_ = -1;
  int slave_ = -1;
};

// Each test gets an empty directory dir() (under TRAINPACK_TEST_TMP when ctest sets it), in which
// `dir_` names the logger directory under test (not created), and leaves no logger directory
// behind.
class LoggerDir : public testing::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_FALSE(logger::get_logger_dir().has_value());
    testing::TempDirTest::SetUp();
    dir_ = path("run").string();
  }

  // `dir_` holding `a.txt`.
  void make_non_empty() {
    fs::create_directories(dir_);
    write_file(fs::path(dir_) / "a.txt", "old run");
  }

  // The text that follows `prefix` in the first logged line that starts with it.
  static std::string after(const LogCapture& log, const std::string& prefix) {
    for (const auto& line : log.lines()) {
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
    }
    ADD_FAILURE() << "no line starting with " << prefix;
    return "";
  }

  std::string dir_;
};

TEST_F(LoggerDir, MissingDirectoryNeedsNoActionAndIsCreated) {
  StdinFromDevNull stdin_null;
  logger::set_logger_dir(dir_);
  EXPECT_EQ(logger::get_logger_dir(), dir_);
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"log.log"});
}

TEST_F(LoggerDir, EmptyDirectoryNeedsNoAction) {
  StdinFromDevNull stdin_null;
  fs::create_directories(dir_);
  logger::set_logger_dir(dir_);
  EXPECT_EQ(logger::get_logger_dir(), dir_);
}

TEST_F(LoggerDir, HiddenOnlyDirectoryCountsAsEmptyAndIsKept) {
  StdinFromDevNull stdin_null;
  fs::create_directories(dir_);
  write_file(fs::path(dir_) / ".hidden", "x");
  logger::set_logger_dir(dir_);
  EXPECT_EQ(entries(dir_), (std::vector<std::string>{".hidden", "log.log"}));
}

TEST_F(LoggerDir, KeepKeepsTheFiles) {
  make_non_empty();
  logger::set_logger_dir(dir_, 'k');
  EXPECT_EQ(logger::get_logger_dir(), dir_);
  EXPECT_EQ(entries(dir_), (std::vector<std::string>{"a.txt", "log.log"}));
  EXPECT_EQ(read_file(fs::path(dir_) / "a.txt"), "old run");
}

TEST_F(LoggerDir, DeleteRemovesTheFiles) {
  make_non_empty();
  fs::create_directories(fs::path(dir_) / "sub");
  write_file(fs::path(dir_) / "sub" / "b.txt", "x");
  logger::set_logger_dir(dir_, 'd');
  EXPECT_EQ(logger::get_logger_dir(), dir_);
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"log.log"});
}

TEST_F(LoggerDir, BackupMovesTheOldDirectoryWithItsFilesAndStartsAnEmptyOne) {
  make_non_empty();
  LogCapture log;
  logger::set_logger_dir(dir_, 'b');
  const std::string prefix = "Directory '" + dir_ + "' backuped to '";
  const std::string rest = after(log, prefix);
  ASSERT_THAT(rest, MatchesRegex(".*/run\\.[0-9]{4}-[0-9]{6}'"));
  const std::string backup = rest.substr(0, rest.size() - 1);
  EXPECT_EQ(backup.rfind(dir_ + ".", 0), 0u) << backup;
  EXPECT_EQ(entries(backup), std::vector<std::string>{"a.txt"});
  EXPECT_EQ(read_file(fs::path(backup) / "a.txt"), "old run");
  EXPECT_EQ(logger::get_logger_dir(), dir_);
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"log.log"});
}

TEST_F(LoggerDir, BackupAddsACounterWhenTheNameIsTaken) {
  make_non_empty();
  // Take the names of this second and the next two: set_logger_dir runs within them.
  for (int s = 0; s < 3; ++s) fs::create_directories(dir_ + "." + time_suffix(s));
  LogCapture log;
  logger::set_logger_dir(dir_, 'b');
  const std::string rest = after(log, "Directory '" + dir_ + "' backuped to '");
  EXPECT_THAT(rest, MatchesRegex(".*/run\\.[0-9]{4}-[0-9]{6}-1'"));
  const std::string backup = rest.substr(0, rest.size() - 1);
  EXPECT_EQ(entries(backup), std::vector<std::string>{"a.txt"});
}

TEST_F(LoggerDir, NewUsesANewDirectoryAndLeavesTheOldIntact) {
  make_non_empty();
  LogCapture log;
  logger::set_logger_dir(dir_, 'n');
  const auto dir = logger::get_logger_dir();
  ASSERT_TRUE(dir.has_value());
  EXPECT_THAT(*dir, MatchesRegex(".*/run\\.[0-9]{4}-[0-9]{6}"));
  EXPECT_EQ(dir->rfind(dir_ + ".", 0), 0u) << *dir;
  EXPECT_TRUE(log.contains("Use a new log directory " + *dir));
  EXPECT_EQ(entries(*dir), std::vector<std::string>{"log.log"});
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"a.txt"});
}

TEST_F(LoggerDir, QuitThrowsSayingTheDirectoryExistsAndChangesNothing) {
  const std::string previous = (dir() / "previous").string();
  logger::set_logger_dir(previous);
  make_non_empty();
  try {
    logger::set_logger_dir(dir_, 'q');
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("log directory '" + dir_ + "' exists"));
    EXPECT_THAT(e.what(), HasSubstr("'k' (keep)"));
    EXPECT_THAT(e.what(), HasSubstr("'d' (delete)"));
    EXPECT_THAT(e.what(), HasSubstr("'b' (back up"));
    EXPECT_THAT(e.what(), HasSubstr("'n' (use a new directory"));
  }
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"a.txt"});
  // The previous directory is still the logger directory, and its log.log still receives lines.
  EXPECT_EQ(logger::get_logger_dir(), previous);
  TP_LOG_INFO("still here");
  EXPECT_THAT(read_file(fs::path(previous) / "log.log"), HasSubstr("] still here\n"));
}

TEST_F(LoggerDir, QuitOnAnEmptyDirectoryUsesIt) {
  logger::set_logger_dir(dir_, 'q');
  EXPECT_EQ(logger::get_logger_dir(), dir_);
}

TEST_F(LoggerDir, ActionsAreCaseInsensitive) {
  make_non_empty();
  logger::set_logger_dir(dir_, 'K');
  EXPECT_EQ(entries(dir_), (std::vector<std::string>{"a.txt", "log.log"}));
  logger::set_logger_dir(dir_, "D");
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"log.log"});
  logger::set_logger_dir(dir_, 'N');
  EXPECT_NE(logger::get_logger_dir(), dir_);
  logger::set_logger_dir(dir_, "B");
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"log.log"});
  EXPECT_THROW(logger::set_logger_dir(dir_, 'Q'), std::runtime_error);
}

TEST_F(LoggerDir, UnknownActionIsAnErrorNamingTheValidOnes) {
  for (const std::string action : {"x", "kd"}) {
    try {
      logger::set_logger_dir(dir_, action);
      FAIL() << "expected std::invalid_argument for " << action;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("'" + action + "'"));
      EXPECT_THAT(e.what(), HasSubstr("'k' (keep), 'd' (delete), 'b' (back up), 'n' (new "
                                      "directory) or 'q' (quit)"));
    }
  }
  // Checked before anything is created, whether or not the directory exists.
  EXPECT_FALSE(fs::exists(dir_));
  EXPECT_FALSE(logger::get_logger_dir().has_value());
}

TEST_F(LoggerDir, EmptyStringMeansNoAction) {
  StdinFromDevNull stdin_null;
  logger::set_logger_dir(dir_, "");
  EXPECT_EQ(logger::get_logger_dir(), dir_);
  EXPECT_THROW(logger::set_logger_dir(dir_, ""), std::invalid_argument);
}

TEST_F(LoggerDir, NoActionWithoutATerminalThrowsNamingTheDirectory) {
  make_non_empty();
  StdinFromDevNull stdin_null;
  try {
    logger::set_logger_dir(dir_);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'" + dir_ + "' exists"));
    EXPECT_THAT(e.what(), HasSubstr("not a terminal"));
    EXPECT_THAT(e.what(), HasSubstr("pass an action: 'k' (keep), 'd' (delete), 'b' (back up), "
                                    "'n' (new directory) or 'q' (quit)"));
  }
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"a.txt"});
  EXPECT_FALSE(logger::get_logger_dir().has_value());
}

TEST_F(LoggerDir, OnATerminalPromptsUntilAnAnswer) {
  Pty pty;
  if (!pty.ok()) GTEST_SKIP() << "no pseudo-terminal";
  make_non_empty();
  LogCapture log;
  pty.type("\n  \n K \n");
  {
    RedirectFd stdin_tty(STDIN_FILENO, pty.slave());
    ::testing::internal::CaptureStdout();
    logger::set_logger_dir(dir_);
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_GE(log.lines().size(), 2u);
  EXPECT_EQ(log.lines()[0], "WRN Log directory " + dir_ + " exists! Use 'd' to delete it. ");
  EXPECT_EQ(log.lines()[1],
            "WRN If you're resuming from a previous run, you can choose to keep it.\n"
            "Press any other key to exit. ");
  const std::string prompt = "Select Action: k (keep) / d (delete) / q (quit):";
  EXPECT_THAT(out, HasSubstr(prompt + prompt + prompt));
  EXPECT_THAT(out, Not(HasSubstr(prompt + prompt + prompt + prompt)));
  EXPECT_EQ(entries(dir_), (std::vector<std::string>{"a.txt", "log.log"}));
}

TEST_F(LoggerDir, OnATerminalAnyOtherAnswerQuits) {
  Pty pty;
  if (!pty.ok()) GTEST_SKIP() << "no pseudo-terminal";
  make_non_empty();
  pty.type("yes\n");
  RedirectFd stdin_tty(STDIN_FILENO, pty.slave());
  ::testing::internal::CaptureStdout();
  try {
    logger::set_logger_dir(dir_);
    ADD_FAILURE() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'" + dir_ + "' exists"));
    EXPECT_THAT(e.what(), HasSubstr("answer 'yes'"));
  }
  ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"a.txt"});
}

TEST_F(LoggerDir, LogFileStartsWithArgvThenHoldsEveryLaterLineWithoutColour) {
  logger::set_logger_dir(dir_);
  TP_LOG_INFO("hello {}", 1);
  TP_LOG_WARN("careful");
  TP_LOG_ERROR("broken");
  // Flushed line by line: readable while the file is open.
  const std::string text = read_file(fs::path(dir_) / "log.log");
  const std::string stamp = "\\[[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} @";
  EXPECT_THAT(text,
              ContainsRegex("^" + stamp + "logger\\.cpp:[0-9]+\\] Argv: [^\n]*trainpack_tests"));
  EXPECT_THAT(text, ContainsRegex("\n" + stamp + "logger_test\\.cpp:[0-9]+\\] hello 1\n"));
  EXPECT_THAT(text, ContainsRegex("\n" + stamp + "logger_test\\.cpp:[0-9]+\\] WRN careful\n"));
  EXPECT_THAT(text, ContainsRegex("\n" + stamp + "logger_test\\.cpp:[0-9]+\\] ERR broken\n$"));
  EXPECT_EQ(text.find('\033'), std::string::npos);
}

TEST_F(LoggerDir, ArgvIsTheCommandLine) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!cmdline.empty() && cmdline.back() == '\0') cmdline.pop_back();
  std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
  LogCapture log;
  logger::set_logger_dir(dir_);
  EXPECT_EQ(log.lines().front(), "Argv: " + cmdline);
}

TEST_F(LoggerDir, KeptLogFileIsBackedUpAndTheBackupIsLogged) {
  logger::set_logger_dir(dir_);
  TP_LOG_INFO("first run");
  LogCapture log;
  logger::set_logger_dir(dir_, 'k');
  const std::string log_path = dir_ + "/log.log";
  const std::string rest = after(log, "Existing log file '" + log_path + "' backuped to '");
  ASSERT_THAT(rest, MatchesRegex(".*/log\\.log\\.[0-9]{4}-[0-9]{6}'"));
  const std::string backup = rest.substr(0, rest.size() - 1);
  EXPECT_EQ(backup.rfind(log_path + ".", 0), 0u) << backup;
  EXPECT_THAT(read_file(backup), HasSubstr("] first run\n"));
  const std::string text = read_file(log_path);
  EXPECT_THAT(text, ContainsRegex("^\\[[^]]*\\] Argv: "));
  EXPECT_THAT(text, Not(HasSubstr("first run")));
}

TEST_F(LoggerDir, ASecondDirectoryDetachesTheFirstFile) {
  const std::string other = (dir() / "other").string();
  logger::set_logger_dir(dir_);
  logger::set_logger_dir(other);
  TP_LOG_INFO("to the second");
  EXPECT_THAT(read_file(fs::path(other) / "log.log"), HasSubstr("] to the second\n"));
  EXPECT_THAT(read_file(fs::path(dir_) / "log.log"), Not(HasSubstr("to the second")));
}

TEST_F(LoggerDir, UnsetClosesTheFile) {
  logger::set_logger_dir(dir_);
  logger::unset_logger_dir();
  EXPECT_FALSE(logger::get_logger_dir().has_value());
  TP_LOG_INFO("after unset");
  EXPECT_THAT(read_file(fs::path(dir_) / "log.log"), Not(HasSubstr("after unset")));
}

TEST_F(LoggerDir, NormalisesThePath) {
  logger::set_logger_dir(dir_ + "//sub/./x/../");
  EXPECT_EQ(logger::get_logger_dir(), dir_ + "/sub");
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "sub" / "log.log"));
}

TEST_F(LoggerDir, EmptyNameIsAnError) {
  EXPECT_THROW(logger::set_logger_dir(""), std::invalid_argument);
}

TEST_F(LoggerDir, AFileInPlaceOfTheDirectoryIsAnErrorNamingIt) {
  write_file(dir_, "not a directory");
  try {
    logger::set_logger_dir(dir_);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'" + dir_ + "'"));
    EXPECT_THAT(e.what(), HasSubstr("not a directory"));
  }
  EXPECT_EQ(read_file(dir_), "not a directory");
  EXPECT_FALSE(logger::get_logger_dir().has_value());
}

TEST_F(LoggerDir, ADirectoryThatCannotBeCreatedIsAnErrorNamingItAndTheReason) {
  write_file(dir_, "a file");
  const std::string sub = dir_ + "/sub";
  try {
    logger::set_logger_dir(sub);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot create '" + sub + "'"));
    EXPECT_THAT(e.what(), HasSubstr("Not a directory"));
  }
}

TEST_F(LoggerDir, AutoSetDirUsesTrainLogAndTheProgramName) {
  const fs::path cwd = fs::current_path();
  fs::current_path(dir());
  logger::auto_set_dir();
  EXPECT_EQ(logger::get_logger_dir(), "train_log/trainpack_tests");
  logger::auto_set_dir('d', "exp");
  EXPECT_EQ(logger::get_logger_dir(), "train_log/trainpack_tests:exp");
  EXPECT_TRUE(fs::exists(dir() / "train_log" / "trainpack_tests:exp" / "log.log"));
  logger::unset_logger_dir();
  fs::current_path(cwd);
}

// ---- one run per log directory ----

mode_t current_umask() {
  const mode_t mask = ::umask(022);
  ::umask(mask);
  return mask;
}

// A child process that makes `dir` its logger directory and then waits to be killed.
class LockHolder {
 public:
  explicit LockHolder(const std::string& dir) {
    int ready[2];
    EXPECT_EQ(::pipe(ready), 0);
    std::fflush(stdout);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      try {
        logger::set_logger_dir(dir, 'k');
      } catch (...) {
        ::_exit(3);
      }
      const char c = 'x';
      if (::write(ready[1], &c, 1) != 1) ::_exit(4);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    EXPECT_EQ(::read(ready[0], &c, 1), 1) << "the child did not take the directory";
    ::close(ready[0]);
  }
  ~LockHolder() { kill(); }
  pid_t pid() const { return pid_; }
  // SIGKILL: the kernel releases the lock, nothing else does.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

TEST_F(LoggerDir, ADirectoryAnotherRunHoldsIsRefusedNamingItsProcessAndNeverMoved) {
  LockHolder holder(dir_);
  const std::string holder_log = read_file(fs::path(dir_) / "log.log");
  for (char action : {'k', 'b', 'd', 'n'}) {
    SCOPED_TRACE(std::string(1, action));
    if (action == 'n') {
      // 'n' leaves the directory alone: a new one is used, which nobody holds.
      logger::set_logger_dir(dir_, action);
      EXPECT_NE(logger::get_logger_dir(), dir_);
      logger::unset_logger_dir();
      continue;
    }
    try {
      logger::set_logger_dir(dir_, action);
      FAIL() << "expected std::runtime_error";
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("log directory " + dir_ + " is in use by process " +
                                      std::to_string(holder.pid()) + " (since "));
      EXPECT_THAT(e.what(), HasSubstr("wait for it to finish or use another directory"));
    }
    EXPECT_FALSE(logger::get_logger_dir().has_value());
    EXPECT_EQ(read_file(fs::path(dir_) / "log.log"), holder_log);  // not moved, not renamed
  }
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"log.log"});
  holder.kill();
  // A killed run's lock is gone with it: the directory can be taken (and moved) at once.
  logger::set_logger_dir(dir_, 'k');
  EXPECT_EQ(logger::get_logger_dir(), dir_);
  logger::set_logger_dir(dir_, 'b');
  EXPECT_EQ(logger::get_logger_dir(), dir_);
}

// The directory itself is locked: deleting the lock file (a clean-up script) does not let a second
// run in, and the refusal still names the holder (from the kernel's lock table).
TEST_F(LoggerDir, DeletingTheLockFileDoesNotReleaseTheDirectory) {
  LockHolder holder(dir_);
  ASSERT_TRUE(fs::remove(fs::path(dir_) / ".trainpack.lock"));
  try {
    logger::set_logger_dir(dir_, 'k');
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("log directory " + dir_ + " is in use by process " +
                                    std::to_string(holder.pid())));
  }
  EXPECT_FALSE(logger::get_logger_dir().has_value());
  holder.kill();
  logger::set_logger_dir(dir_, 'k');
  EXPECT_EQ(logger::get_logger_dir(), dir_);
}

// The temporary file of a write that a killed process left (a checkpoint's can be large) is removed
// by the next run that takes the directory; those of running processes, links and other names
// stay.
TEST_F(LoggerDir, TemporaryFilesOfProcessesThatNoLongerRunAreRemoved) {
  fs::create_directories(dir_);
  // A process id that no longer runs: a child that has exited and been waited for.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ::waitpid(gone, nullptr, 0);
  const std::string dead = "model-8.data.tmp." + std::to_string(gone) + ".3";
  const std::string alive = "model-8.data.tmp." + std::to_string(::getppid()) + ".0";
  write_file(fs::path(dir_) / dead, "half a checkpoint");
  write_file(fs::path(dir_) / alive, "being written");
  write_file(fs::path(dir_) / "notes.tmp.txt", "mine");
  write_file(path("outside.txt"), "outside");
  fs::create_symlink(path("outside.txt"),
                     fs::path(dir_) / ("x.tmp." + std::to_string(gone) + ".1"));
  LogCapture log;
  logger::set_logger_dir(dir_, 'k');
  EXPECT_FALSE(fs::exists(fs::path(dir_) / dead));
  EXPECT_TRUE(fs::exists(fs::path(dir_) / alive));
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "notes.tmp.txt"));
  EXPECT_TRUE(fs::is_symlink(fs::path(dir_) / ("x.tmp." + std::to_string(gone) + ".1")));
  EXPECT_EQ(read_file(path("outside.txt")), "outside");
  EXPECT_TRUE(log.contains("Removed " + (fs::path(dir_) / dead).string() +
                           ", a temporary file left by a process that no longer runs."));
}

// log.log is no more readable than its directory: a private directory keeps a private log even
// with the usual umask 022.
TEST_F(LoggerDir, TheLogIsNoMoreReadableThanItsDirectory) {
  fs::create_directories(dir_);
  ::chmod(dir_.c_str(), 0700);
  logger::set_logger_dir(dir_, 'k');
  struct stat st {};
  ASSERT_EQ(::stat((fs::path(dir_) / "log.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  logger::unset_logger_dir();
  ::chmod(dir_.c_str(), 0755);
  logger::set_logger_dir(dir_, 'k');
  ASSERT_EQ(::stat((fs::path(dir_) / "log.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0044, 0044u & ~static_cast<unsigned>(current_umask()));
}

TEST_F(LoggerDir, TheLockFileNamesTheOwnerAndASecondCallOfTheSameProcessMayRetakeIt) {
  logger::set_logger_dir(dir_, 'k');
  const std::string owner = read_file(fs::path(dir_) / ".trainpack.lock");
  EXPECT_EQ(owner.rfind(std::to_string(::getpid()) + " ", 0), 0u) << owner;
  logger::set_logger_dir(dir_, 'k');  // the previous lock is released first
  logger::set_logger_dir(dir_, 'd');
  EXPECT_EQ(logger::get_logger_dir(), dir_);
}

TEST_F(LoggerDir, ALinkPlantedAsTheLockFileIsRefusedAndTheFileBehindItKept) {
  fs::create_directories(dir_);
  const fs::path outside = path("outside.txt");
  write_file(outside, "someone else's file");
  const fs::path lock = fs::path(dir_) / ".trainpack.lock";
  for (const bool hard : {true, false}) {
    SCOPED_TRACE(hard ? "hard link" : "symlink");
    if (hard) {
      fs::create_hard_link(outside, lock);
    } else {
      fs::create_symlink(outside, lock);
    }
    try {
      logger::set_logger_dir(dir_, 'k');
      ADD_FAILURE() << "expected std::runtime_error";
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(lock.string()));
      if (hard) {
        EXPECT_THAT(e.what(), HasSubstr("has 2 hard links"));
      }
    }
    EXPECT_FALSE(logger::get_logger_dir().has_value());
    EXPECT_EQ(read_file(outside), "someone else's file");  // never followed, truncated or written
    fs::remove(lock);
  }
}

TEST_F(LoggerDir, BackingUpOrDeletingTheCurrentDirectoryOrTheRootIsAClearError) {
  make_non_empty();
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  for (const std::string& d : std::vector<std::string>{".", "..", dir_}) {
    for (char action : {'b', 'd'}) {
      SCOPED_TRACE(d + " " + std::string(1, action));
      try {
        logger::set_logger_dir(d, action);
        ADD_FAILURE() << "expected std::runtime_error";
      } catch (const std::runtime_error& e) {
        EXPECT_THAT(e.what(), HasSubstr("it holds the current directory"));
      }
    }
  }
  fs::current_path(cwd);
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"a.txt"});
  try {
    logger::set_logger_dir("/", 'b');  // never 'd' here, in case the check were missing
    ADD_FAILURE() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("it is the root directory"));
  }
}

TEST(LoggerConsole, FormatIsTensorpacksWithLevelTagsAndNoColourOffATerminal) {
  ::testing::internal::CaptureStdout();
  TP_LOG_INFO("plain {}", 42);
  TP_LOG_WARN("a warning");
  TP_LOG_ERROR("an error");
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string stamp = "\\[[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} @logger_test\\.cpp:[0-9]+\\] ";
  EXPECT_THAT(out, MatchesRegex(stamp + "plain 42\n" + stamp + "WRN a warning\n" + stamp +
                                "ERR an error\n"));
  EXPECT_EQ(out.find('\033'), std::string::npos);
}

TEST(LoggerConsole, DebugLinesAreTaggedAndHiddenByDefault) {
  const logger::Level before = logger::level();
  ::testing::internal::CaptureStdout();
  TP_LOG_DEBUG("hidden");
  logger::set_level(logger::Level::kDebug);
  TP_LOG_DEBUG("shown");
  logger::set_level(before);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, Not(HasSubstr("hidden")));
  EXPECT_THAT(out, HasSubstr("] DBG shown\n"));
}

TEST(LoggerConsole, ColourOnlyOnATerminal) {
  Pty pty;
  if (!pty.ok()) GTEST_SKIP() << "no pseudo-terminal";
  {
    RedirectFd stdout_tty(STDOUT_FILENO, pty.slave());
    TP_LOG_INFO("green stamp");
    TP_LOG_WARN("red tag");
  }
  const std::string screen = pty.screen();
  EXPECT_THAT(screen, HasSubstr("\033[32m["));
  EXPECT_THAT(screen, HasSubstr("]\033[0m green stamp"));
  EXPECT_THAT(screen, HasSubstr("]\033[0m \033[5m\033[31mWRN \033[0mred tag"));
}

}  // namespace logger_test
}  // namespace trainpack
