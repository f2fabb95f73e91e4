#include "trainpack/callbacks/console.h"

#include <errno.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <functional>
#include <istream>
#include <optional>
#include <ostream>
#include <sstream>

#include "trainpack/callbacks/param.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/detail/signals.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

using Print = std::function<void(const std::string&)>;

constexpr int64_t kDefaultHistory = 10;

std::vector<std::string> split_words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  std::string w;
  while (in >> w) words.push_back(w);
  return words;
}

std::string repr(double v) { return python_float_repr(v); }

// Every registered callback, wrappers (ProxyCallback) opened, in registration order.
void collect_callbacks(const CallbackPtr& cb, std::vector<Callback*>* out) {
  if (!cb) return;
  out->push_back(cb.get());
  if (const auto* proxy = dynamic_cast<const ProxyCallback*>(cb.get())) {
    collect_callbacks(proxy->inner(), out);
  }
}

std::vector<Callback*> all_callbacks(const Trainer& trainer) {
  std::vector<Callback*> out;
  for (const auto& cb : trainer.registered_callbacks()) collect_callbacks(cb, &out);
  return out;
}

// The setters among the callbacks that set the param `name`, as "HumanHyperParamSetter, ...".
std::string setters_of(const Trainer& trainer, const std::string& name) {
  std::vector<std::string> names;
  for (Callback* cb : all_callbacks(trainer)) {
    if (const auto* setter = dynamic_cast<const HyperParamSetter*>(cb)) {
      if (setter->param().readable_name() == name) names.push_back(setter->name());
    }
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

const char* const kHelp[] = {
    "Commands:",
    "  stats                the latest value of every statistic",
    "  history <name> [n]   the last n (default 10) values of a statistic",
    "  params               the hyperparameters and their ranges",
    "  set <name> <value>   set a hyperparameter (within its range)",
    "  save                 save a checkpoint now (with the ModelSaver)",
    "  stop                 stop training at this point",
    "  continue             resume training (also: end of input, Ctrl-D)",
    "  help                 this list",
};

void cmd_stats(Trainer& trainer, const Print& print) {
  const Monitors& monitors = trainer.monitors();
  const std::vector<std::string> names = monitors.names();
  if (names.empty()) {
    print("No statistics yet.");
    return;
  }
  print(fmt::format("Statistics at global_step={} (latest values):", trainer.global_step()));
  for (const std::string& name : names) {
    const auto& entry = monitors.get_history(name).back();
    print(fmt::format("  {} = {} (global_step={})", name, repr(entry.second), entry.first));
  }
}

void cmd_history(Trainer& trainer, const std::vector<std::string>& words, const Print& print) {
  if (words.size() < 2 || words.size() > 3) {
    print("Usage: history <name> [n]");
    return;
  }
  int64_t n = kDefaultHistory;
  if (words.size() == 3) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(words[2].c_str(), &end, 10);
    if (errno != 0 || end == words[2].c_str() || *end != '\0' || v < 1) {
      print(fmt::format("history: '{}' is not a positive number of values.", words[2]));
      return;
    }
    n = static_cast<int64_t>(v);
  }
  const auto& history = trainer.monitors().get_history(words[1]);
  if (history.empty()) {
    print(fmt::format("history: no statistic named '{}'; 'stats' lists them.", words[1]));
    return;
  }
  const size_t k = std::min(history.size(), static_cast<size_t>(n));
  print(fmt::format("{}: the last {} of {} values:", words[1], k, history.size()));
  for (size_t i = history.size() - k; i < history.size(); ++i) {
    print(fmt::format("  global_step={}: {}", history[i].first, repr(history[i].second)));
  }
}

void cmd_params(Trainer& trainer, const Print& print) {
  const Graph& graph = trainer.graph();
  print("Hyperparameters:");
  for (const std::string& name : graph.variable_names()) {
    const Graph::Variable& var = graph.variable(name);
    const double v = var.get();
    if (name == "global_step") {
      print(fmt::format("  {} = {} (the step counter; read-only)", name, static_cast<int64_t>(v)));
      continue;
    }
    std::string line = fmt::format("  {} = {} ({}{})", name, repr(v), var.range.str(),
                                   var.is_floating ? "" : ", integer");
    const std::string setters = setters_of(trainer, name);
    if (!setters.empty()) line += "; also set by " + setters;
    print(line);
  }
}

// `print_logs`: what `print` prints goes to the log already (the console without a terminal).
void cmd_set(Trainer& trainer, const std::vector<std::string>& words, const Print& print,
             bool print_logs) {
  if (words.size() != 3) {
    print("Usage: set <name> <value>");
    return;
  }
  const std::string& name = words[1];
  Graph& graph = trainer.graph();
  if (!graph.has_variable(name)) {
    print(fmt::format("set: no hyperparameter named '{}'; 'params' lists them.", name));
    return;
  }
  if (name == "global_step") {
    print("set: global_step is the step counter; it cannot be set.");
    return;
  }
  const std::string& text = words[2];
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') {
    print(fmt::format("set: '{}' is not a number.", text));
    return;
  }
  const Graph::Variable& var = graph.variable(name);
  const double old = var.get();
  if (!var.range.contains(value)) {
    print(fmt::format("set: {} = {} is outside its range ({}); keeping {} = {}", name, repr(value),
                      var.range.str(), name, repr(old)));
    return;
  }
  if (!var.is_floating && std::nearbyint(value) != value) {
    print(fmt::format("set: {} holds integers and {} is not one; keeping {} = {}", name,
                      repr(value), name, repr(old)));
    return;
  }
  try {
    var.set(value);
  } catch (const std::exception& e) {
    print(fmt::format("set: setting {} failed: {}", name, e.what()));
    return;
  }
  const std::string change =
      fmt::format("{} changes from {} to {}.", name, repr(old), repr(var.get()));
  if (print_logs) {
    print(fmt::format("At global_step={}, {}", trainer.global_step(), change));
  } else {
    print(change);
    TP_LOG_INFO("[Console] At global_step={}, {}", trainer.global_step(), change);
  }
  const std::string setters = setters_of(trainer, name);
  if (!setters.empty()) {
    print(
        fmt::format("Note: {} also sets {}; its next run may replace this value.", setters, name));
  }
}

void cmd_save(Trainer& trainer, const Print& print) {
  ModelSaver* saver = nullptr;
  for (Callback* cb : all_callbacks(trainer)) {
    if ((saver = dynamic_cast<ModelSaver*>(cb)) != nullptr) break;
  }
  if (saver == nullptr) {
    print("save: the trainer has no ModelSaver among its callbacks; nothing was saved.");
    return;
  }
  const int64_t gs = trainer.global_step();
  const std::string name = fmt::format("model-{}", gs);
  // save() only hands the snapshot to ModelSaver's writer thread: wait until it is on disk, so
  // that "Saved" means what it says.
  if (saver->save() && saver->flush()) {
    print(fmt::format("Saved {} in {}.", name, saver->checkpoint_dir()));
    return;
  }
  const auto& tracked = saver->tracked();
  const bool saved_already = std::any_of(tracked.begin(), tracked.end(),
                                         [&](const auto& entry) { return entry.first == name; });
  print(saved_already ? fmt::format("{} was saved at this step already (in {}).", name,
                                    saver->checkpoint_dir())
                      : fmt::format("save: saving {} failed; the log says why.", name));
}

// Runs one command line; the outcome for `continue` / `stop`, nullopt otherwise.
std::optional<ConsoleOutcome> run_command(Trainer& trainer, const std::string& line,
                                          const Print& print, bool print_logs) {
  const std::vector<std::string> words = split_words(line);
  if (words.empty()) return std::nullopt;
  const std::string& cmd = words[0];
  const bool no_args = words.size() == 1;
  if (cmd == "continue" && no_args) {
    TP_LOG_INFO("[Console] Training continues at global_step={}.", trainer.global_step());
    return ConsoleOutcome::kContinue;
  }
  if (cmd == "stop" && no_args) {
    TP_LOG_INFO("[Console] Stop requested at global_step={}.", trainer.global_step());
    return ConsoleOutcome::kStop;
  }
  if (cmd == "help" && no_args) {
    for (const char* l : kHelp) print(l);
  } else if (cmd == "stats" && no_args) {
    cmd_stats(trainer, print);
  } else if (cmd == "params" && no_args) {
    cmd_params(trainer, print);
  } else if (cmd == "save" && no_args) {
    cmd_save(trainer, print);
  } else if (cmd == "history") {
    cmd_history(trainer, words, print);
  } else if (cmd == "set") {
    cmd_set(trainer, words, print, print_logs);
  } else if (cmd == "help" || cmd == "stats" || cmd == "params" || cmd == "save" ||
             cmd == "continue" || cmd == "stop") {
    print(fmt::format("'{}' takes no arguments.", cmd));
  } else {
    print(fmt::format("Unknown command '{}'. Type 'help' for the commands.", cmd));
  }
  return std::nullopt;
}

// Line input from a file descriptor (a terminal) or a stream. A stop signal while waiting ends the
// input, so that the trainer can act on it.
class LineInput {
 public:
  explicit LineInput(const ConsoleOptions& options) : options_(options) {}

  enum class Status { kLine, kEnd, kSignal, kError };

  Status read_line(std::string* line) {
    if (options_.input() != nullptr) {
      return std::getline(*options_.input(), *line) ? Status::kLine : Status::kEnd;
    }
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        *line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return Status::kLine;
      }
      struct pollfd pfd {};
      pfd.fd = options_.input_fd();
      pfd.events = POLLIN;
      // A stop signal wakes the console up. The signals are blocked while the flag is checked
      // and ppoll unblocks them atomically, so one that arrives just before the wait is not
      // missed (poll() is not restarted after a handler, SA_RESTART notwithstanding). The kernel
      // may deliver a process-directed signal to another thread (LibTorch's, a writer's): its
      // handler sets the flag without interrupting this wait, so the wait also ends every tick
      // to look at the flag again.
      sigset_t stop_signals, previous;
      sigemptyset(&stop_signals);
      for (int sig : detail::default_stop_signals()) sigaddset(&stop_signals, sig);
      pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
      int r = 0;
      int err = 0;
      if (detail::pending_signal() == 0) {
        const struct timespec tick = {0, 100 * 1000 * 1000};  // 100 ms
        r = ::ppoll(&pfd, 1, &tick, &previous);
        err = errno;
      }
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      if (detail::pending_signal() != 0) return Status::kSignal;
      if (r == 0) continue;  // the tick: no input yet
      if (r < 0) {
        if (err != EINTR) return Status::kError;
        continue;
      }
      char chunk[512];
      const ssize_t n = ::read(options_.input_fd(), chunk, sizeof(chunk));
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return Status::kError;
      }
      if (n == 0) {  // end of input; a last line without newline still counts
        if (buffer_.empty()) return Status::kEnd;
        *line = std::move(buffer_);
        buffer_.clear();
        return Status::kLine;
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  const ConsoleOptions& options_;
  std::string buffer_;
};

class Output {
 public:
  explicit Output(const ConsoleOptions& options) : options_(options) {}

  // Writes `text` as it is; false on an I/O error.
  bool write(const std::string& text) {
    if (options_.output() != nullptr) {
      *options_.output() << text << std::flush;
      return static_cast<bool>(*options_.output());
    }
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(options_.output_fd(), text.data() + done, text.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      done += static_cast<size_t>(n);
    }
    return true;
  }

 private:
  const ConsoleOptions& options_;
};

}  // namespace

ConsoleOutcome run_training_console(Trainer& trainer, const std::string& reason,
                                    const ConsoleOptions& options) {
  Output out(options);
  LineInput in(options);
  bool ok = true;
  const Print print = [&](const std::string& line) { ok = out.write(line + "\n") && ok; };
  if (!reason.empty()) print(reason);
  print(
      fmt::format("Training is paused at global_step={} (epoch {}). Type 'help' for the commands, "
                  "'continue' to resume.",
                  trainer.global_step(), trainer.epoch_num()));
  while (ok) {
    ok = out.write(options.prompt());
    if (!ok) break;
    std::string line;
    switch (in.read_line(&line)) {
      case LineInput::Status::kLine:
        break;
      case LineInput::Status::kEnd:
        print("");
        TP_LOG_INFO("[Console] End of input: training continues at global_step={}.",
                    trainer.global_step());
        return ConsoleOutcome::kContinue;
      case LineInput::Status::kSignal:
        print("");
        TP_LOG_INFO("[Console] {} received: leaving the console.",
                    stop_signal_name(detail::pending_signal()));
        return ConsoleOutcome::kContinue;
      case LineInput::Status::kError:
        ok = false;
        continue;
    }
    if (auto outcome = run_command(trainer, line, print, false)) return *outcome;
  }
  TP_LOG_WARN("[Console] Cannot read or write the console's input or output: training continues.");
  return ConsoleOutcome::kContinue;
}

ConsoleOutcome run_console_commands(Trainer& trainer, const std::string& reason,
                                    const std::vector<std::string>& commands) {
  if (!reason.empty()) TP_LOG_INFO("[Console] {}", reason);
  const Print print = [](const std::string& line) { TP_LOG_INFO("[Console] {}", line); };
  for (const std::string& raw : commands) {
    const auto first = raw.find_first_not_of(" \t\r");
    if (first == std::string::npos || raw[first] == '#') continue;
    std::string command = raw.substr(first);
    while (!command.empty() &&
           (command.back() == '\r' || command.back() == ' ' || command.back() == '\t')) {
      command.pop_back();
    }
    TP_LOG_INFO("[Console] > {}", command);
    if (auto outcome = run_command(trainer, command, print, true)) return *outcome;
  }
  TP_LOG_INFO("[Console] End of the commands: training continues at global_step={}.",
              trainer.global_step());
  return ConsoleOutcome::kContinue;
}

// A terminal, and this process in its foreground: a background job (`./train &`) that read from it
// would be stopped by SIGTTIN.
bool stdin_is_terminal() { return ::isatty(0) == 1 && ::tcgetpgrp(0) == ::getpgrp(); }

}  // namespace trainpack
