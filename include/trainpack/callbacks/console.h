// The training console: a small command interpreter that looks at and steers a paused run.
// InjectShell opens it when its file appears; a debugging hook may open it when a watched tensor
// goes bad. It runs on the training thread, between two steps: training waits until the user
// continues or stops.
//
//   if (stdin_is_terminal()) {
//     if (run_training_console(trainer(), "NaN in 'cost'.") == ConsoleOutcome::kStop)
//       throw StopTraining("stopped from the console");
//   }
//
// Commands (one per line; words separated by blanks):
//   stats                  the latest value of every statistic put to the monitors, by name
//   history <name> [n]     the last n (default 10) values of a statistic, with their global_step
//   params                 the trainer's hyperparameters (the Graph's variables) and their ranges
//   set <name> <value>     sets a hyperparameter; refused (with the range) when the value is
//                          outside its range, as hyper.txt values are; global_step cannot be set
//   save                   saves a checkpoint now with the trainer's ModelSaver, if it has one,
//                          and waits until it is written (ModelSaver::flush)
//   stop                   ends the console; the caller stops training at this boundary
//   continue               ends the console; training resumes
//   help                   lists the commands
// An unknown command or a bad argument prints a line saying so; the console goes on. End of input
// (Ctrl-D) is `continue`. A stop signal (Ctrl-C, SIGTERM) while the console waits for a line ends
// it as `continue`: the trainer then stops at this boundary because of the signal, as it would
// anywhere else (and ModelSaver saves at the signal).
//
// What changes the run is also logged (so it is in log.log): `[Console] At global_step=300,
// learning_rate changes from 0.1 to 0.05.`, `[Console] stop requested at global_step=300.`.
//
// Errors: none thrown for the user's input; an I/O error on the console's streams ends it as
// `continue`, with a warning.
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
