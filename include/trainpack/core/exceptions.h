// Exceptions that the training loop treats specially.
//
// Differences from tensorpack: CallbackError is trainpack's (tensorpack lets a hook's exception
// through as it is); StopTraining is the same.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trainpack {

// Throw from anywhere inside training (a hook, run_step, a dataflow) to end training cleanly:
// the loop logs "Training was stopped by exception <message>." and every after_train runs.
// tensorpack's `StopTraining`; an exhausted input raises a subclass of it.
class StopTraining : public std::runtime_error {
 public:
  explicit StopTraining(const std::string& message = "") : std::runtime_error(message) {}
};

// A hook of a callback threw. what() is "Callback <name> failed in <hook>: <message>"; the
// original exception is nested (std::rethrow_if_nested gets it back).
class CallbackError : public std::runtime_error {
 public:
  CallbackError(std::string callback, std::string hook, const std::string& message)
      : std::runtime_error("Callback " + callback + " failed in " + hook + ": " + message),
        callback_(std::move(callback)),
        hook_(std::move(hook)) {}
  const std::string& callback() const { return callback_; }
  const std::string& hook() const { return hook_; }

 private:
  std::string callback_;
  std::string hook_;
};

// Training ended (every after_train ran), but files that callbacks promised to write could not be
// written: a checkpoint ModelSaver could not save, the best copy of MinSaver/MaxSaver, stats.json,
// an event file (Trainer::report_write_failure). Thrown by Trainer::main_loop (and so by train)
// at the very end, also after a stop by a signal. what() says how many writes failed, which files
// (the first ones, with the callback and the count) and the first error; files() lists every file
// in the order of their first failure.
class WriteFailedError : public std::runtime_error {
 public:
  WriteFailedError(const std::string& message, std::vector<std::string> files, int64_t failures)
      : std::runtime_error(message), files_(std::move(files)), failures_(failures) {}
  const std::vector<std::string>& files() const { return files_; }
  int64_t failure_count() const { return failures_; }

 private:
  std::vector<std::string> files_;
  int64_t failures_;
};

}  // namespace trainpack
