// Input sources: how batches reach the training step (tensorpack's `input_source` package).
// Public names: InputSource, FeedInput, QueueInput, QueueInputOptions.
//
//   auto ds = std::make_shared<BatchData>(std::make_shared<FashionMnist>("train"), 64);
//   trainer.setup_graph(model->inputs(), std::make_shared<QueueInput>(ds), ...);
//
// A trainer calls `setup(signature, device)` once, registers the callbacks it returns (they run
// before every other callback, with chief_only false) and then calls `next_batch()` inside every
// step. `next_batch()` returns the batch checked against the signature (a mismatch is
// std::invalid_argument naming the source, the input, the expected and the actual shape/dtype)
// and placed on the trainer's device. docs/input.md tells which source to use when.
//
// Passes: the first next_batch() begins pass 0 of the dataflow; when a pass ends, the source
// begins the next one (tensorpack's sources repeat their dataflow forever). A pass that yields
// nothing at all means the data has run out: next_batch() throws DataExhausted, which ends
// training as StopTraining does (global_step is then the number of batches delivered).
//
// Staging to the device: on a CUDA device, batches are copied from pinned host memory with
// non-blocking copies (QueueInput pins them on its prefetch thread, so the copy overlaps the
// previous step); on the CPU nothing is copied. A CUDA device without a GPU fails at setup with a
// message that says so.
//
// Lifetime: the callbacks that setup() returns refer to the source; keep the source alive while
// they can run (the trainer holds both).
//
// Exact resume (docs/save-load.md): the callback named after the source (FeedInput, QueueInput)
// has the state `pass` and `position` (int64): the dataflow pass of the last batch next_batch()
// returned, and how many batches of that pass it has returned (the trainer's consumption, never
// what was prefetched), and `dataflow` (the DataFlow::describe() of the flow they count in: a
// resume over another batch size or data set is refused, see set_allow_changed_input). Its
// load_state (after setup, before before_train) makes the source start there: begin_pass(pass),
// then seek(position), without reading the skipped batches; a position equal to the pass's size
// continues with the first batch of the next pass. It needs a dataflow that seeks
// (DataFlow::seekable(): DataFromList, FashionMnist, BatchData and MapData over them). With another
// one (DataFromGenerator, a flow of your own) the checkpoint's position is not restored: a warning
// names the flow and the data starts from its beginning, as tensorpack's always does; everything
// else (weights, counters, schedules) is still restored exactly. resume_at(), called directly,
// refuses such a flow with std::invalid_argument instead.
//
// Differences from tensorpack: next_batch() is called by the step function (tensorpack feeds a
// placeholder or dequeues inside the session run); every source copies its batch to the device
// inside next_batch() (StagingInput, staging_input.h, copies batches ahead on a side stream); the
// end of data is DataExhausted instead of OutOfRangeError.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <c10/core/Device.h>
#include <torch/arg.h>

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

// The base of the input sources: the call-once setup, the checks and the staging around the
// subclass's `_setup` (its callbacks) and `_next_batch` (the next host batch).
//   auto callbacks = source->setup(signature, c10::Device(c10::kCPU));
//   for (auto& cb : callbacks) trainer.register_callback(cb);   // before train()
//   ... inside a step: std::vector<at::Tensor> batch = source->next_batch();
// Errors: a second setup() is std::logic_error (tensorpack's call-once message); a device other
// than the CPU or CUDA is std::invalid_argument; a CUDA device without a GPU is
// std::runtime_error; next_batch() before setup() is std::logic_error.
// Differences from tensorpack: see the top of this file.
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

  // For a consumer that copies the host batches to a GPU itself (StagingInput): asks a source
  // set up on the CPU to deliver its batches in pinned (page-locked) host memory, so that the
  // consumer's copies are asynchronous. Call before setup(). QueueInput pins them on its
  // prefetch thread; FeedInput and other sources ignore it (the consumer pins them). Pinning
  // needs a GPU.
  void set_pin_host_batches(bool pin) { pin_host_batches_ = pin; }
  bool pin_host_batches() const { return pin_host_batches_; }

  // Where training stands in the data (see "Exact resume" above), and how to start elsewhere:
  // FeedInput and QueueInput implement both; by default consumed() is (0, 0) and resume_at
  // throws std::logic_error naming the source. A data-parallel trainer uses them to give every
  // rank the chief's restored position.
  virtual InputPosition consumed() const;
  virtual void resume_at(InputPosition point);

  // Whether a checkpoint saved over another dataflow (DataFlow::describe() differs: another
  // batch size, data set size or chain) may be resumed: false (the default) refuses it in
  // load_state with std::invalid_argument naming both; true continues with a warning, taking the
  // saved position as a position in this dataflow. TrainConfig().allow_changed_input sets it.
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

// Pulls each batch from the dataflow on the training thread (tensorpack's FeedInput). The
// simplest source: no thread, no queue; the dataflow's time adds to each step's. Use it when the
// dataflow is cheap (data in memory) or for debugging (an exception has the training thread's
// stack).
//   auto input = std::make_shared<FeedInput>(std::make_shared<BatchData>(ds, 32));
// Callbacks: one, named FeedInput, that calls the dataflow's reset_state() in before_train. Its
// state is consumed() (see "Exact resume" above); its load_state calls resume_at() (or warns and
// starts the data from its beginning when the dataflow cannot seek).
// Errors: a null dataflow is std::invalid_argument; next_batch() before before_train (the
// callbacks were not registered) is std::logic_error.
// Differences from tensorpack: those at the top of this file.
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
  // Makes the first next_batch() begin pass `point.pass` and seek to `point.position` (checked
  // now, done then, after before_train's reset_state). Throws std::invalid_argument for a
  // negative pass or position, a position past the pass's size, or a dataflow that cannot seek
  // (naming it); std::logic_error after the first batch.
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

struct QueueInputOptions {
  // Batches the prefetch thread may hold ahead of training (tensorpack's queue capacity, 50).
  TORCH_ARG(int64_t, capacity) = 50;
};

// Prefetches batches on a background thread into a bounded queue (tensorpack's QueueInput), so
// that producing the next batch overlaps the current step. The default source for a dataflow
// that does real work per batch (decoding, augmentation).
//   auto input = std::make_shared<QueueInput>(batches, QueueInputOptions().capacity(16));
//
// The thread starts in before_train (start(): the dataflow's reset_state(), then the thread; logs
// `Starting EnqueueThread QueueInput/input_queue ...`) and is stopped and joined in after_train,
// also when training fails; destroying the source joins it too. The dataflow is used only by that
// thread from then on. An exception in the dataflow is stored and rethrown from next_batch() on
// the training thread, as it was, after the batches queued before it. The end of the data reaches
// next_batch() as DataExhausted after the queued batches. stop() wakes a producer waiting on a
// full queue and a next_batch() waiting on an empty one (which then throws StopTraining); it
// cannot interrupt the dataflow's own next(), and waits for it to return.
//
// Every step (in before_run, before the step takes its batch), an EMA (decay 0.5, zero-debiased
// as add_moving_summary's) of the number of queued batches is recorded as the scalar summary
// `QueueInput/queue_size`, which MergeAllSummaries puts to the monitors (ScalarPrinter prints
// `QueueInput/queue_size: 50` when the thread keeps the queue full).
//
// Callbacks: `QueueInput` (start in before_train, stop in after_train) and
// `QueueInput/queue_size` (the summary). The state of `QueueInput` is consumed(), see "Exact
// resume" above (each queued batch carries its pass and position, so batches that were
// prefetched but not taken are produced again after a resume), plus the queue-size EMA:
// `queue_size_biased` (float64) and `queue_size_updates` (int64), optional in load_state.
// Errors: a null dataflow or capacity < 1 is std::invalid_argument; next_batch() before the
// thread was started (the callbacks were not registered) is std::logic_error.
// Differences from tensorpack: the queue holds host tensors (a std::deque under a mutex, not a
// TF FIFOQueue); a dataflow exception reaches the training thread (tensorpack's enqueue thread
// logs it and closes the queue); the queue-size EMA is kept on the host.
class QueueInput : public InputSource {
 public:
  explicit QueueInput(DataFlowPtr dataflow, QueueInputOptions options = {});
  ~QueueInput() override;
  QueueInput(const QueueInput&) = delete;
  QueueInput& operator=(const QueueInput&) = delete;
  std::string name() const override { return "QueueInput"; }
  std::optional<int64_t> size() const override { return dataflow_->size(); }
  std::string describe() const override { return dataflow_->describe(); }
  const DataFlowPtr& dataflow() const { return dataflow_; }
  const QueueInputOptions& options() const { return options_; }

  // Starts / stops the prefetch thread (what the callbacks call). start() calls the dataflow's
  // reset_state() first and may be called once (std::logic_error after that, and before
  // setup()). stop() is idempotent and may be called from any thread.
  void start();
  void stop();
  // True from start() until stop() has joined the thread.
  bool running() const;
  // Batches waiting in the queue now.
  int64_t queued() const;

  // The batches next_batch() has returned (not those prefetched): (0, 0) before the first one (or
  // the point given to resume_at, until the next batch).
  InputPosition consumed() const override;
  // Makes start() begin pass `point.pass` and seek to `point.position` before the thread starts.
  // Throws std::invalid_argument for a negative pass or position, a position past the pass's
  // size, or a dataflow that cannot seek (naming it); std::logic_error once start() was called.
  void resume_at(InputPosition point) override;

 protected:
  std::vector<CallbackPtr> _setup() override;
  std::optional<Datapoint> _next_batch() override;
  std::string end_of_data_reason() const override;

 private:
  // The thread's loop; start() has begun the first pass (`pass_yielded`: it has datapoints
  // before the current position).
  void produce(bool pass_yielded);

  DataFlowPtr dataflow_;
  QueueInputOptions options_;
  mutable std::mutex mutex_;  // guards everything below except thread_
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  struct Queued {
    Datapoint batch;
    InputPosition at;  // the dataflow's pass and position after producing it
  };
  std::deque<Queued> queue_;
  InputPosition consumed_;
  std::optional<InputPosition> resume_;  // where start() begins (resume_at)
  std::exception_ptr error_;             // set by the thread; rethrown after the queued batches
  bool exhausted_ = false;               // the thread saw the end of the data
  int64_t exhausted_pass_ = -1;
  bool started_ = false;
  bool stopping_ = false;
  bool joined_ = false;
  std::mutex join_mutex_;  // serialises joining (stop() from two threads)
  std::thread thread_;
};

}  // namespace trainpack
