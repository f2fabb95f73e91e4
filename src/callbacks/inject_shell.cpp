#include "trainpack/callbacks/inject_shell.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "trainpack/core/exceptions.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/terminal_text.h"

namespace trainpack {

InjectShell::InjectShell(std::string file, std::string shell, InjectShellOptions options)
    : file_(std::move(file)), shell_(std::move(shell)), options_(std::move(options)) {
  if (file_.empty()) {
    throw std::invalid_argument(
        "InjectShell: file is empty; give the path of the file that opens the shell, e.g. "
        "\"INJECT_SHELL.tmp\"");
  }
  if (shell_ != "console" && shell_ != "gdb") {
    throw std::invalid_argument(fmt::format(
        "InjectShell: shell must be \"console\" or \"gdb\", got \"{}\" (tensorpack's \"ipython\" "
        "and \"pdb\" are Python's; \"console\" is the training console)",
        shell_));
  }
}

namespace {

// Closes a descriptor when it goes out of scope.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

bool InjectShell::own_file_exists() const {
  // lstat: a symbolic link is not followed (see _trigger).
  struct stat st {};
  return ::lstat(file_.c_str(), &st) == 0 && (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) &&
         st.st_uid == ::geteuid();
}

void InjectShell::_setup_graph() {
  TP_LOG_INFO("Create a file '{}' to open {} shell.", file_, shell_);
}

void InjectShell::_trigger() {
  // Whether the file (`what` it is) belongs to another user than the job's effective one: then it
  // is ignored, with a warning once per version of it (not at every trigger).
  const auto foreign = [this](const struct stat& st, const char* what) {
    const uid_t euid = ::geteuid();
    if (st.st_uid == euid) return false;
    const FileVersion version{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                              static_cast<uint64_t>(st.st_uid),
                              static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 +
                                  static_cast<int64_t>(st.st_ctim.tv_nsec)};
    if (refused_ && *refused_ == version) return true;
    refused_ = version;
    TP_LOG_WARN(
        "[InjectShell] {} is {} owned by uid {}, not by this job's user (uid {}): it is ignored "
        "(and not warned about again until it changes). Only a file of the job's own user opens "
        "the shell, since in a shared directory anyone may create it: create it as uid {}, or "
        "give InjectShell a path in a directory of your own.",
        file_, what, st.st_uid, euid, euid);
    return true;
  };
  // One lstat() per trigger: nothing else happens while there is no file, and a symbolic link is
  // not followed.
  struct stat st {};
  if (::lstat(file_.c_str(), &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) {
    refused_.reset();
    return;
  }
  if (foreign(st, S_ISLNK(st.st_mode) ? "a symbolic link" : "a file")) return;
  if (S_ISLNK(st.st_mode)) {
    // Planted in a shared directory, a link would make the job read (and echo) a file its log's
    // readers may not see. It is removed, as the file is once acted on, and nothing is run.
    TP_LOG_WARN(
        "[InjectShell] {} is a symbolic link and is not followed; removed it. Create a plain file "
        "to open the shell.",
        file_);
    if (::unlink(file_.c_str()) != 0 && errno != ENOENT) {
      TP_LOG_WARN("[InjectShell] Cannot remove {} ({}).", file_, std::strerror(errno));
    }
    return;
  }
  // What is checked and read is what was opened: without following a link (replaced by one
  // since the lstat: ELOOP), without blocking, and its type and owner checked again with fstat.
  Descriptor file{::open(file_.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno != ENOENT && errno != ELOOP) {
      TP_LOG_WARN("[InjectShell] Cannot open {} ({}); the shell does not open.", file_,
                  std::strerror(errno));
    }
    return;  // gone, or a link now: the next trigger looks again
  }
  if (::fstat(file.fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
  if (foreign(st, "a file")) return;
  refused_.reset();
  TP_LOG_INFO("File {} exists, entering shell.", file_);
  if (shell_ == "gdb") {
    stop_for_debugger();
  } else {
    open_console(file.fd, static_cast<int64_t>(st.st_size));
  }
}

namespace {

// The lines of the command file open as `fd` (a regular file of `size` bytes), each with what a
// terminal acts on escaped (terminal_safe: a line is echoed to stdout and the log); nullopt, with
// a warning that names the file and not its content, when it is larger than `max` bytes or
// cannot be read.
std::optional<std::vector<std::string>> read_commands(int fd, int64_t size, const std::string& path,
                                                      int64_t max) {
  std::string text;
  try {
    if (size > max) {
      throw FileRefusedError(EFBIG, path,
                             fmt::format("is {} bytes, more than the {}-byte limit for a console "
                                         "command file",
                                         size, max));
    }
    // At most one byte more than the limit: a file that grows while it is read is not read on.
    text.resize(static_cast<size_t>(max) + 1);
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = read_some(fd, text.data() + got, text.size() - got);
      if (n < 0) throw_file_error("read", path, errno);
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    text.resize(got);
    if (static_cast<int64_t>(got) > max) {  // grew while it was read
      throw FileRefusedError(EFBIG, path,
                             fmt::format("grew past the {}-byte limit for a console command file "
                                         "while it was read",
                                         max));
    }
  } catch (const std::exception& e) {
    TP_LOG_WARN("[InjectShell] {}; no commands are run.", e.what());
    return std::nullopt;
  }
  std::vector<std::string> lines;
  std::istringstream lines_in(text);
  std::string line;
  while (std::getline(lines_in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a CRLF file
    lines.push_back(terminal_safe(line, LineFeeds::kEscape));
  }
  return lines;
}

}  // namespace

void InjectShell::open_console(int fd, int64_t size) {
  const bool interactive = options_.interactive().value_or(stdin_is_terminal());
  std::optional<std::vector<std::string>> commands;
  if (!interactive) commands = read_commands(fd, size, file_, kMaxFileSize);
  // Removed before the shell runs, so that it opens once for each creation of the file.
  if (::unlink(file_.c_str()) != 0 && errno != ENOENT) {
    TP_LOG_WARN("[InjectShell] Cannot remove {} ({}); the shell opens again at the next trigger.",
                file_, std::strerror(errno));
  }
  const std::string reason = fmt::format("InjectShell: the file {} exists.", file_);
  ConsoleOutcome outcome;
  if (interactive) {
    outcome = run_training_console(trainer(), reason, options_.console());
  } else {
    outcome =
        run_console_commands(trainer(), reason, commands ? *commands : std::vector<std::string>());
  }
  if (outcome == ConsoleOutcome::kStop) {
    throw StopTraining(
        fmt::format("InjectShell: stop from the console at global_step={}", global_step()));
  }
}

void InjectShell::stop_for_debugger() {
  if (::unlink(file_.c_str()) != 0 && errno != ENOENT) {
    TP_LOG_WARN("[InjectShell] Cannot remove {} ({}); the process stops again at the next trigger.",
                file_, std::strerror(errno));
  }
  const pid_t pid = ::getpid();
  TP_LOG_INFO("[InjectShell] To attach a debugger: gdb -p {}", pid);
  TP_LOG_INFO(
      "[InjectShell] Process {} stops itself now (SIGSTOP); it resumes on SIGCONT: `kill -CONT {}` "
      "(also after detaching the debugger), or `fg` in its shell.",
      pid, pid);
  // Yama's ptrace_scope=1 lets only ancestors attach: allow any process of this user while
  // stopped.
  ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  ::raise(SIGSTOP);
  ::prctl(PR_SET_PTRACER, 0, 0, 0, 0);
  TP_LOG_INFO("[InjectShell] Continued: training resumes at global_step={}.", global_step());
}

void InjectShell::_after_train() {
  if (own_file_exists() && ::unlink(file_.c_str()) != 0) {
    TP_LOG_WARN("[InjectShell] Cannot remove {} ({}).", file_, std::strerror(errno));
  }
}

}  // namespace trainpack
