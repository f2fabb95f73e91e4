// Test support for input sources: a FeedInput or a QueueInput made alike, a trainer whose step
// takes one batch from a source, and a hang-guarded wait for what another thread (QueueInput's)
// does.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <thread>
#include <utility>
#include <vector>

#include "trainpack/core/trainer.h"
#include "trainpack/input/input_source.h"

namespace trainpack {
namespace testing {

// The two sources that read a dataflow: FeedInput (on the trainer's thread) and QueueInput (on a
// thread of its own). A test parameter, printed by its class name.
enum class SourceKind { kFeed, kQueue };
inline void PrintTo(SourceKind kind, std::ostream* os) {
  *os << (kind == SourceKind::kFeed ? "FeedInput" : "QueueInput");
}

// A source of `kind` over `ds` (a QueueInput holding up to `capacity` datapoints).
inline InputSourcePtr make_source(SourceKind kind, DataFlowPtr ds, int64_t capacity = 50) {
  if (kind == SourceKind::kFeed) return std::make_shared<FeedInput>(std::move(ds));
  return std::make_shared<QueueInput>(std::move(ds), QueueInputOptions().capacity(capacity));
}

// Waits until `pred` holds; false after a minute (a hang guard, not a timing assertion).
template <typename Pred>
bool wait_until(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// A NoOpTrainer whose step takes one batch from the source (inside the hooked run, as
// SimpleTrainer does), set up on the CPU. `first` callbacks are registered before the source's;
// the source's own are `source_callbacks` (the first one holds the position).
class SourceTrainer : public NoOpTrainer {
 public:
  SourceTrainer(InputSourcePtr source, const InputSignature& signature,
                const std::vector<CallbackPtr>& first = {})
      : source_(std::move(source)) {
    set_handle_signals(false);
    for (const auto& cb : first) register_callback(cb);
    source_callbacks = source_->setup(signature, c10::Device(c10::kCPU));
    for (const auto& cb : source_callbacks) register_callback(cb);
  }
  void run_step() override {
    hooked_run([this](StepContext&) { batches.push_back(source_->next_batch()); });
  }
  Callback& position_callback() const { return *source_callbacks.at(0); }

  std::vector<CallbackPtr> source_callbacks;
  std::vector<std::vector<at::Tensor>> batches;

 private:
  InputSourcePtr source_;
};

}  // namespace testing
}  // namespace trainpack
