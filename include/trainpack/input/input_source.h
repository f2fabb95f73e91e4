// Input sources: how batches reach the training step (tensorpack's `input_source` package:
// InputSource, FeedInput; QueueInput is in input/queue_input.h, included at the end). docs/input.md
// tells which source to use when, and how they differ from tensorpack's.
//
// A trainer calls `setup(signature, device)` once, registers the callbacks it returns (they run
// before every other callback, with chief_only false; they refer to the source, so keep it alive
// while they can run) and then calls `next_batch()` inside every step. `next_batch()` returns the
// batch checked against the signature (a mismatch is std::invalid_argument naming the source, the
// input, the expected and the actual shape/dtype) and placed on the trainer's device (on CUDA from
// pinned host memory, non-blocking; nothing is copied on the CPU).
//
// Passes: the first next_batch() begins pass 0 of the dataflow; when a pass ends, the source
// begins the next one. A pass that yields nothing means the data has run out: next_batch() throws
// DataExhausted, which ends training as StopTraining does.
//
// Exact resume (docs/save-load.md): the callback named after the source has the state `pass` and
// `position` (int64: consumed(), the trainer's consumption, never what was prefetched) and
// `dataflow` (DataFlow::describe(): a resume over another dataflow is refused, see
// set_allow_changed_input). Its load_state makes the source start there, without reading the
// skipped batches, over a dataflow that seeks (DataFlow::seekable()); over another one it warns
// and starts the data from its beginning (as tensorpack always does), and resume_at(), called
// directly, throws std::invalid_argument.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "trainpack/core/callback.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_desc.h"

namespace trainpack {

// Where training stands in the data: the dataflow pass of the last batch next_batch() returned
// and the number of batches of that pass returned so far; (0, 0) before the first batch.
struct InputPosition {
  int64_t pass = 0;
  int64_t position = 0;
};

// The base of the input sources (tensorpack's InputSource): the call-once setup, the checks and
// the staging around the subclass's `_setup` (its callbacks) and `_next_batch` (the next host
// batch). Errors: a second setup() is std::logic_error (tensorpack's call-once message); a device
// other than the CPU or CUDA is std::invalid_argument; a CUDA device without a GPU is
// std::runtime_error; next_batch() before setup() is std::logic_error.
class InputSource {
 public:
  virtual ~InputSource();
  // Class name for messages.
  virtual std::string name() const = 0;
  // Batches per pass of the underlying dataflow; nullopt when unknown (TrainConfig then needs
  // steps_per_epoch).
  virtual std::optional<int64_t> size() const = 0;
  // What the source reads, for messages and for the ranks' check that they read the same data:
  // its dataflow's DataFlow::describe() (FeedInput, QueueInput, and a source that wraps one);
  // name() for a source without a dataflow.
  virtual std::string describe() const { return name(); }

  // Binds the signature and the device; returns the callbacks that drive the source (with
  // chief_only false). Call once (std::logic_error on a second call).
  std::vector<CallbackPtr> setup(const InputSignature& signature, c10::Device device);
  bool setup_done() const { return setup_done_; }

  // The next batch, checked and on the device. Throws DataExhausted when the data has run out
  // (its message names the source and the dataflow), std::invalid_argument on a batch that does
  // not match the signature, std::logic_error before setup; an exception from the dataflow comes
  // out here as it was thrown (same type, same message).
  std::vector<at::Tensor> next_batch();

  const InputSignature& signature() const { return signature_; }
  c10::Device device() const { return device_; }

  // For a consumer that copies the host batches to a GPU itself (StagingInput): asks a source set
  // up on the CPU for batches in pinned host memory. Call before setup(). QueueInput pins them on
  // its prefetch thread; other sources ignore it (the consumer pins them). Needs a GPU.
  void set_pin_host_batches(bool pin) { pin_host_batches_ = pin; }
  bool pin_host_batches() const { return pin_host_batches_; }

  // Where training stands in the data (see "Exact resume" above), and how to start elsewhere
  // (a data-parallel trainer gives every rank the chief's position). By default consumed() is
  // (0, 0) and resume_at throws std::logic_error naming the source.
  virtual InputPosition consumed() const;
  virtual void resume_at(InputPosition point);

  // Whether a checkpoint saved over another dataflow (DataFlow::describe() differs) may be
  // resumed: false (the default) refuses it in load_state with std::invalid_argument naming both;
  // true continues with a warning. TrainConfig().allow_changed_input sets it.
  void set_allow_changed_input(bool allow) { allow_changed_input_ = allow; }
  bool allow_changed_input() const { return allow_changed_input_; }

 protected:
  // The subclass's callbacks (reset the dataflow, start/stop threads, ...).
  virtual std::vector<CallbackPtr> _setup() = 0;
  // The next batch on the host (or already staged); nullopt when the data has run out.
  virtual std::optional<Datapoint> _next_batch() = 0;
  // Why the data ran out, for DataExhausted's message after "<name()>: ".
  virtual std::string end_of_data_reason() const { return "the input has no more data"; }

  // Copies `batch` to device() (pinned + non-blocking on CUDA; nothing on the CPU).
  std::vector<at::Tensor> to_device(Datapoint batch) const;

 private:
  InputSignature signature_;
  c10::Device device_ = c10::Device(c10::kCPU);
  bool setup_done_ = false;
  bool pin_host_batches_ = false;
  bool allow_changed_input_ = false;
};

using InputSourcePtr = std::shared_ptr<InputSource>;

// Pulls each batch from the dataflow on the training thread (tensorpack's FeedInput): no thread,
// no queue; the dataflow's time adds to each step's. Callbacks: one, named FeedInput, that calls
// the dataflow's reset_state() in before_train; its state is consumed(). Errors: a null dataflow
// is std::invalid_argument; next_batch() before before_train is std::logic_error.
class FeedInput : public InputSource {
 public:
  explicit FeedInput(DataFlowPtr dataflow);
  std::string name() const override { return "FeedInput"; }
  std::optional<int64_t> size() const override { return dataflow_->size(); }
  std::string describe() const override { return dataflow_->describe(); }
  const DataFlowPtr& dataflow() const { return dataflow_; }

  // The batches next_batch() has returned: (0, 0) before the first one (or the point given to
  // resume_at, until the next batch).
  InputPosition consumed() const override { return consumed_; }
  // Makes the first next_batch() begin pass `point.pass` at `point.position`. Throws
  // std::invalid_argument for a negative pass or position, a position past the pass's size, or a
  // dataflow that cannot seek; std::logic_error after the first batch.
  void resume_at(InputPosition point) override;

 protected:
  std::vector<CallbackPtr> _setup() override;
  std::optional<Datapoint> _next_batch() override;
  std::string end_of_data_reason() const override;

 private:
  DataFlowPtr dataflow_;
  bool reset_done_ = false;
  bool started_ = false;       // the first pass has begun
  bool pass_yielded_ = false;  // the current pass produced a datapoint
  InputPosition consumed_;
  std::optional<InputPosition> resume_;  // where the first pass begins (resume_at)
};

}  // namespace trainpack

// QueueInput, once declared here (it includes this header, so it comes last).
#include "trainpack/input/queue_input.h"
