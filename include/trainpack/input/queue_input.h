// QueueInput (tensorpack's QueueInput, input_source package): the input source that prefetches
// batches on a thread of its own. The base, InputSource, and the position and resume rules every
// source keeps are in input/input_source.h. docs/input.md tells when to use which source.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/callback.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"

namespace trainpack {

struct QueueInputOptions {
  // Batches the prefetch thread may hold ahead of training (tensorpack's queue capacity, 50).
  TORCH_ARG(int64_t, capacity) = 50;
};

// Prefetches batches on a background thread into a bounded queue (tensorpack's QueueInput), so
// that producing the next batch overlaps the current step.
//
// The thread starts in before_train (start(): the dataflow's reset_state(), then the thread; logs
// `Starting EnqueueThread QueueInput/input_queue ...`) and is stopped and joined in after_train,
// also when training fails, or when the source is destroyed. Only that thread uses the dataflow
// from then on. An exception in the dataflow, and the end of the data (DataExhausted), reach
// next_batch() on the training thread, as they were, after the batches queued before them.
// stop() wakes a producer waiting on a full queue and a next_batch() waiting on an empty one
// (which then throws StopTraining); it waits for the dataflow's own next() to return.
//
// Callbacks: `QueueInput` (start, stop) and `QueueInput/queue_size`, which records every step
// (before the step takes its batch) an EMA (decay 0.5, zero-debiased) of the queued batches as
// the scalar summary `QueueInput/queue_size`. The state of `QueueInput` is consumed() (batches
// prefetched but not taken are produced again after a resume) and the EMA's
// `queue_size_biased` (float64) and `queue_size_updates` (int64), optional in load_state.
// Errors: a null dataflow or capacity < 1 is std::invalid_argument; next_batch() before the
// thread was started is std::logic_error.
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
