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
// and placed on the trainer's device.
//
// Passes: when the dataflow's pass ends, the source starts the next pass (tensorpack's sources
// repeat their dataflow forever). A pass that yields nothing at all means the data has run out:
// next_batch() throws DataExhausted, which ends training as StopTraining does.
//
// Staging to the device: on a CUDA device, batches are copied from pinned host memory with
// non-blocking copies (QueueInput pins them on its prefetch thread, so the copy overlaps the
// previous step); on the CPU nothing is copied. A CUDA device without a GPU fails at setup with a
// message that says so.
//
// Differences from tensorpack: next_batch() is called by the step function (tensorpack feeds a
// placeholder or dequeues inside the session run); there is no separate StagingInput class:
// staging is part of every source; the end of data is DataExhausted instead of OutOfRangeError.
#pragma once

#include <atomic>
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

#include "trainpack/callbacks/base.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/train/tower.h"

namespace trainpack {

class InputSource {
 public:
  virtual ~InputSource();
  // Class name for messages.
  virtual std::string name() const = 0;
  // Batches per pass of the underlying dataflow; nullopt when unknown (TrainConfig then needs
  // steps_per_epoch).
  virtual std::optional<int64_t> size() const = 0;

  // Binds the signature and the device; returns the callbacks that drive the source (with
  // chief_only false). Call once (std::logic_error on a second call).
  std::vector<CallbackPtr> setup(const InputSignature& signature, c10::Device device);
  bool setup_done() const { return setup_done_; }

  // The next batch, checked and on the device. Throws DataExhausted when the data has run out,
  // std::invalid_argument on a batch that does not match the signature, std::logic_error before
  // setup; an exception from the dataflow comes out here with its message.
  std::vector<at::Tensor> next_batch();

  const InputSignature& signature() const { return signature_; }
  c10::Device device() const { return device_; }

 protected:
  // The subclass's callbacks (reset the dataflow, start/stop threads, ...).
  virtual std::vector<CallbackPtr> _setup() = 0;
  // The next batch on the host (or already staged); nullopt when the data has run out.
  virtual std::optional<Datapoint> _next_batch() = 0;

  // Copies `batch` to device() (pinned + non-blocking on CUDA; nothing on the CPU).
  std::vector<at::Tensor> to_device(Datapoint batch) const;

 private:
  InputSignature signature_;
  c10::Device device_ = c10::Device(c10::kCPU);
  bool setup_done_ = false;
};

using InputSourcePtr = std::shared_ptr<InputSource>;

// Pulls each batch from the dataflow on the training thread (tensorpack's FeedInput). The
// simplest source: no thread, no queue; the dataflow's time adds to each step's.
// Callbacks: one that resets the dataflow in before_train.
class FeedInput : public InputSource {
 public:
  explicit FeedInput(DataFlowPtr dataflow);
  std::string name() const override { return "FeedInput"; }
  std::optional<int64_t> size() const override { return dataflow_->size(); }
  const DataFlowPtr& dataflow() const { return dataflow_; }

 protected:
  std::vector<CallbackPtr> _setup() override;
  std::optional<Datapoint> _next_batch() override;

 private:
  DataFlowPtr dataflow_;
  bool started_ = false;
};

struct QueueInputOptions {
  // Batches the prefetch thread may hold ahead of training (tensorpack's queue capacity, 50).
  TORCH_ARG(int64_t, capacity) = 50;
};

// Prefetches batches on a background thread into a bounded queue (tensorpack's QueueInput), so
// that producing the next batch overlaps the current step.
//
// The thread starts in before_train (after the dataflow's reset_state) and is stopped and joined
// in after_train, also when training fails; destroying the source joins it too. An exception in
// the dataflow is stored and rethrown from next_batch() on the training thread, as it was, after
// the batches queued before it. The end of the data reaches next_batch() as DataExhausted after
// the queued batches.
//
// Every step, an EMA (decay 0.5) of the number of queued batches is recorded as the scalar
// summary `QueueInput/queue_size`, which MergeAllSummaries puts to the monitors at the end of
// every epoch (ScalarPrinter prints `QueueInput/queue_size: 50`).
//
// Errors: capacity < 1 is std::invalid_argument.
class QueueInput : public InputSource {
 public:
  explicit QueueInput(DataFlowPtr dataflow, QueueInputOptions options = {});
  ~QueueInput() override;
  std::string name() const override { return "QueueInput"; }
  std::optional<int64_t> size() const override { return dataflow_->size(); }
  const DataFlowPtr& dataflow() const { return dataflow_; }

  // Starts / stops the prefetch thread (what the callbacks call). stop() is idempotent.
  void start();
  void stop();
  // Batches waiting in the queue now.
  int64_t queued() const;

 protected:
  std::vector<CallbackPtr> _setup() override;
  std::optional<Datapoint> _next_batch() override;

 private:
  void produce();

  DataFlowPtr dataflow_;
  QueueInputOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::deque<Datapoint> queue_;
  std::exception_ptr error_;  // set by the thread; rethrown after the queued batches
  bool exhausted_ = false;    // the thread saw the end of the data
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace trainpack
