#include "trainpack/callbacks/inject_shell.h"

#include <errno.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "trainpack/exceptions.h"
#include "trainpack/train/trainer.h"
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
  struct stat st {};
  return ::stat(file_.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void InjectShell::_setup_graph() {
  TP_LOG_INFO("Create a file '{}' to open {} shell.", file_, shell_);
}

void InjectShell::_trigger() {
  if (!file_exists()) return;
  TP_LOG_INFO("File {} exists, entering shell.", file_);
  if (shell_ == "gdb") {
    stop_for_debugger();
  } else {
    open_console();
  }
}

namespace {

// Reads at most `max` bytes of `path` as lines; nullopt (with a warning) when it cannot be read.
std::optional<std::vector<std::string>> read_commands(const std::string& path, int64_t max) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    TP_LOG_WARN("[InjectShell] Cannot read {} ({}); no commands are run.", path,
                std::strerror(errno));
    return std::nullopt;
  }
  std::string text(static_cast<size_t>(max) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(text.size()) > max) {
    text.resize(static_cast<size_t>(max));
    TP_LOG_WARN("[InjectShell] {} is larger than {} bytes; only its first {} bytes are read.", path,
                max, max);
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
