// What the input sources of input/input_source.h and input/queue_input.h share: the callback
// that drives a source, and the state of its position in the data with the checks of a resume
// (see "Exact resume" in input/input_source.h). Defined in src/input/input_source.cpp.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "trainpack/core/callback.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"

namespace trainpack {
namespace detail {

// The callback of a source's lifecycle: functions run in before_train and after_train, and its
// resumable state (see "Exact resume" in input_source.h).
class SourceCallback : public Callback {
 public:
  SourceCallback(std::string name, std::function<void()> before_train,
                 std::function<void()> after_train, std::function<CallbackState()> state,
                 std::function<void(const CallbackState&)> load_state)
      : name_(std::move(name)),
        before_train_(std::move(before_train)),
        after_train_(std::move(after_train)),
        state_(std::move(state)),
        load_state_(std::move(load_state)) {}
  std::string name() const override { return name_; }
  CallbackState state() const override { return state_(); }
  void load_state(const CallbackState& state) override { load_state_(state); }

 protected:
  void _before_train() override {
    if (before_train_) before_train_();
  }
  void _after_train() override {
    if (after_train_) after_train_();
  }

 private:
  std::string name_;
  std::function<void()> before_train_;
  std::function<void()> after_train_;
  std::function<CallbackState()> state_;
  std::function<void(const CallbackState&)> load_state_;
};

// The state of a source: its position, and the dataflow it is a position in (describe()), so
// that a resume over another batch size or data set is noticed instead of reinterpreted.
CallbackState position_entries(InputPosition p, const DataFlow& dataflow);

// For a load_state: the checkpoint's position counts batches of the dataflow it was saved with.
// Another one (a batch size, a data set of another size, another chain) would have the position
// reinterpreted: refused, unless `allow` (then a warning). Checkpoints without the entry (saved
// before it existed) are not checked.
void check_same_dataflow(const std::string& who, const CallbackState& state,
                         const DataFlow& dataflow, bool allow);

// The checkpoint's `pass` and `position`; std::invalid_argument naming `who` and the entry when
// one is missing or does not fit.
InputPosition read_position(const std::string& who, const CallbackState& state);

// The checks of resume_at, done at restore time (before_train is too late for a clear message).
void check_resume_point(const std::string& who, const DataFlow& dataflow, InputPosition point);

// For a load_state: whether the checkpoint's position can be restored. A flow that cannot seek
// starts from its beginning instead (tensorpack's behaviour: it never restores the data), with a
// warning, so that AutoResumeTrainConfig works with any dataflow.
bool can_restore_position(const std::string& who, const DataFlow& dataflow, InputPosition point);

// next_batch()'s message when the callbacks setup() returned have not run: `what` did not happen.
std::string not_driven_message(const std::string& source, const char* what);

}  // namespace detail
}  // namespace trainpack
