// Exceptions that the training loop treats specially.
//
// Differences from tensorpack: CallbackError is trainpack's (tensorpack lets a hook's exception
// through as it is); StopTraining is the same.
#pragma once

#include <stdexcept>
#include <string>

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

}  // namespace trainpack
