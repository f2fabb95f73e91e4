// The training console: a small command interpreter that looks at and steers a paused run
// (InjectShell opens it when its file appears, LocalDebugHook on a hit). It runs on the training
// thread between two steps: training waits until the user continues or stops.
// Commands: stats, history <name> [n] (n: 10), params, set <name> <value> (refused outside the
// variable's range, as hyper.txt values are; not global_step), save (with the trainer's
// ModelSaver, waiting until it is written), stop, continue, help. A bad command prints a line and
// the console goes on; end of input, and a stop signal while it waits, are `continue` (the trainer
// then stops for the signal). What changes the run is logged (`[Console] At global_step=300,
// learning_rate changes from 0.1 to 0.05.`). Nothing is thrown for the user's input; an I/O error
// ends the console as `continue`, with a warning.
// See docs/looking-inside.md, "The training console (InjectShell)".
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <torch/arg.h>

namespace trainpack {

class Trainer;

struct ConsoleOptions {
  // The file descriptors the console reads lines from and writes to (a terminal: stdin, stdout).
  TORCH_ARG(int, input_fd) = 0;
  TORCH_ARG(int, output_fd) = 1;
  // Streams to use instead of the descriptors (tests; not owned; null: the descriptors).
 public:
  ConsoleOptions& input(std::istream* in) {
    input_ = in;
    return *this;
  }
  ConsoleOptions& output(std::ostream* out) {
    output_ = out;
    return *this;
  }
  std::istream* input() const { return input_; }
  std::ostream* output() const { return output_; }
  // Printed before each line is read.
  TORCH_ARG(std::string, prompt) = "trainpack> ";

 private:
  std::istream* input_ = nullptr;
  std::ostream* output_ = nullptr;
};

enum class ConsoleOutcome { kContinue, kStop };

// Runs the training console until the user continues or stops: prints `reason`, where training
// is paused (epoch, global_step) and how to get help, then reads and runs commands. kStop asks the
// caller to end training (throw StopTraining, or Trainer::request_stop()); the console itself
// stops nothing. Call it between steps, on the training thread (a hook), after setup_graph.
ConsoleOutcome run_training_console(Trainer& trainer, const std::string& reason,
                                    const ConsoleOptions& options = {});

// The console without a terminal: runs `commands` (blank lines and lines starting with '#' are
// skipped) up to the first `continue` or `stop`, logging `reason`, each command (`[Console] >
// stats`) and every line of its output at INFO, so that they are in the log. Returns kStop for a
// `stop`, kContinue otherwise (the end of the commands is `continue`).
ConsoleOutcome run_console_commands(Trainer& trainer, const std::string& reason,
                                    const std::vector<std::string>& commands);

// Whether standard input is a terminal and this process is in its foreground (not a background
// job, which reading would stop): whether a person can answer the console.
bool stdin_is_terminal();

}  // namespace trainpack
