#include "trainpack/callbacks/inject_shell.h"

#include <errno.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "trainpack/exceptions.h"
#include "trainpack/train/trainer.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/logger.h"

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

bool InjectShell::file_exists() const {
  // lstat: a symbolic link is not followed (see _trigger).
  struct stat st {};
  return ::lstat(file_.c_str(), &st) == 0 && (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode));
}

void InjectShell::_setup_graph() {
  TP_LOG_INFO("Create a file '{}' to open {} shell.", file_, shell_);
}

void InjectShell::_trigger() {
  // One lstat() per trigger (what file_exists does): a symbolic link is not followed.
  struct stat st {};
  if (::lstat(file_.c_str(), &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) return;
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
  TP_LOG_INFO("File {} exists, entering shell.", file_);
  if (shell_ == "gdb") {
    stop_for_debugger();
  } else {
    open_console();
  }
}

namespace {

// The lines of `path`, a regular file of at most `max` bytes, opened without following a link
// and without blocking (file_io.h); nullopt (with a warning that names the file, not its content)
// when it cannot be read.
std::optional<std::vector<std::string>> read_commands(const std::string& path, int64_t max) {
  ReadFileOptions options;
  options.max_bytes = static_cast<uint64_t>(max);
  options.kind = "console command file";
  options.follow_symlinks = false;
  std::string text;
  try {
    text = read_file(path, options);
  } catch (const std::exception& e) {
    TP_LOG_WARN("[InjectShell] {}; no commands are run.", e.what());
    return std::nullopt;
  }
  std::vector<std::string> lines;
  std::istringstream lines_in(text);
  std::string line;
  while (std::getline(lines_in, line)) lines.push_back(line);
  return lines;
}

}  // namespace

void InjectShell::open_console() {
  const bool interactive = options_.interactive().value_or(stdin_is_terminal());
  std::optional<std::vector<std::string>> commands;
  if (!interactive) commands = read_commands(file_, kMaxFileSize);
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
  if (file_exists() && ::unlink(file_.c_str()) != 0) {
    TP_LOG_WARN("[InjectShell] Cannot remove {} ({}).", file_, std::strerror(errno));
  }
}

}  // namespace trainpack
