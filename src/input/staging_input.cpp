#include "trainpack/input/staging_input.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <deque>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trainpack/core/callback_state.h"
#include "trainpack/detail/cuda_streams.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

struct StagingInput::Stage {
  struct Entry {
    Datapoint host;    // CUDA: the pinned host tensors the copy reads (kept as long as `batch`)
    Datapoint batch;   // what the step gets: the device tensors (CUDA), the host ones (CPU)
    InputPosition at;  // the wrapped source's consumed() right after it delivered this batch
    std::optional<detail::CudaEvent> copied;  // CUDA: recorded on the side stream after the copy
  };

  std::deque<Entry> ahead;     // staged, oldest first
  std::optional<Entry> taken;  // handed out last; released at the next take (see the header)
  InputPosition consumed;      // `at` of the batch handed out last
  bool took_any = false;
  bool filled = false;                   // the first take has staged nr_stage batches
  bool released = false;                 // after_train dropped the stage
  std::exception_ptr error;              // from the wrapped source, after the staged batches
  std::optional<std::string> exhausted;  // DataExhausted's message from the wrapped source
  CallbackPtr named;                     // the wrapped source's callback named after it
  bool named_loaded = false;             // its load_state ran (a checkpoint had its entries)
  // CUDA (detail/cuda_streams.h); unused on the CPU.
  c10::DeviceIndex device_index = 0;
  std::optional<detail::CudaStream> side;  // the copies' stream
  std::vector<detail::CudaEvent> spare;    // events blocked on already, to record again
  detail::CudaEvent compute_passed;        // recorded on the compute stream at each take
};

namespace {

CallbackState position_entries(InputPosition p) {
  return {{"pass", state_scalar(p.pass)}, {"position", state_scalar(p.position)}};
}

// The wrapped source's callback named after it (FeedInput, QueueInput: the one whose state is
// the position): its hooks run as they are, but the position it saves is the trainer's
// (StagingInput::consumed()), not the wrapped source's, which is ahead by the staged batches. So
// a checkpoint holds the same position under the wrapped source's name with or without staging.
class StagedPositionCallback : public ProxyCallback {
 public:
  StagedPositionCallback(CallbackPtr inner, const StagingInput& staging, bool* loaded)
      : ProxyCallback(std::move(inner), "StagingInput"), staging_(staging), loaded_(loaded) {}
  std::string name() const override { return callback_->name(); }
  CallbackState state() const override {
    CallbackState s = callback_->state();
    if (s.count("pass") != 0 && s.count("position") != 0) {
      const InputPosition p = staging_.consumed();
      s["pass"] = state_scalar(p.pass);
      s["position"] = state_scalar(p.position);
    }
    return s;
  }
  void load_state(const CallbackState& state) override {
    callback_->load_state(state);
    *loaded_ = true;
  }

 private:
  const StagingInput& staging_;
  bool* loaded_;
};

// StagingInput's own callback: its state is consumed(); after_train drops the stage.
class StagingCallback : public Callback {
 public:
  StagingCallback(std::function<CallbackState()> state,
                  std::function<void(const CallbackState&)> load_state,
                  std::function<void()> after_train)
      : state_(std::move(state)),
        load_state_(std::move(load_state)),
        after_train_(std::move(after_train)) {}
  std::string name() const override { return "StagingInput"; }
  CallbackState state() const override { return state_(); }
  void load_state(const CallbackState& state) override { load_state_(state); }

 protected:
  void _after_train() override { after_train_(); }

 private:
  std::function<CallbackState()> state_;
  std::function<void(const CallbackState&)> load_state_;
  std::function<void()> after_train_;
};

}  // namespace

StagingInput::StagingInput(InputSourcePtr input, StagingInputOptions options)
    : input_(std::move(input)), options_(options), stage_(std::make_unique<Stage>()) {
  if (!input_) {
    throw std::invalid_argument(
        "StagingInput: the input source is null; pass one, e.g. "
        "std::make_shared<QueueInput>(batches)");
  }
  if (options_.nr_stage() < 1) {
    throw std::invalid_argument(fmt::format(
        "StagingInput: nr_stage must be >= 1, got {}; set StagingInputOptions().nr_stage(n) with "
        "n >= 1 (default 1)",
        options_.nr_stage()));
  }
}

StagingInput::~StagingInput() = default;

int64_t StagingInput::staged() const { return static_cast<int64_t>(stage_->ahead.size()); }

InputPosition StagingInput::consumed() const {
  return stage_->took_any ? stage_->consumed : input_->consumed();
}

void StagingInput::resume_at(InputPosition point) {
  if (stage_->filled) {
    throw std::logic_error(
        "StagingInput::resume_at called after the first batch; a restore happens before "
        "training");
  }
  input_->resume_at(point);
}

std::vector<CallbackPtr> StagingInput::_setup() {
  if (input_->setup_done()) {
    throw std::logic_error(fmt::format(
        "StagingInput: the input source {} was set up already; StagingInput sets it up itself "
        "(on the CPU, so that it copies nothing): give it a source that was not set up",
        input_->name()));
  }
  const bool cuda = device().is_cuda();
  if (cuda && !detail::built_with_cuda()) {
    throw std::runtime_error(fmt::format(
        "StagingInput: the device is {}, but trainpack was built without CUDA (TRAINPACK_WITH_CUDA "
        "is not defined); use the CPU device",
        device().str()));
  }
  if (cuda) {
    Stage& s = *stage_;
    s.device_index = device().has_index() ? device().index() : detail::current_cuda_device();
    s.side = detail::CudaStream::from_pool(s.device_index);
    s.spare.reserve(static_cast<size_t>(options_.nr_stage()) + 1);
    TP_LOG_INFO("StagingInput: staging {} batch(es) ahead on cuda:{}, copied on a side stream",
                options_.nr_stage(), s.device_index);
  }
  input_->set_pin_host_batches(cuda);
  std::vector<CallbackPtr> callbacks = input_->setup(signature(), c10::Device(c10::kCPU));
  for (auto& cb : callbacks) {
    if (cb->name() != input_->name() || stage_->named) continue;
    stage_->named = cb;
    cb = std::make_shared<StagedPositionCallback>(cb, *this, &stage_->named_loaded);
  }
  // Runs after the wrapped source's callbacks (registration order): when the checkpoint had the
  // wrapped source's entries, its callback has restored the position already.
  auto load_state = [this](const CallbackState& state) {
    check_state_keys(name(), state, {"pass", "position"});
    const InputPosition point{state_int(name(), state, "pass"),
                              state_int(name(), state, "position")};
    if (stage_->named_loaded) return;
    if (stage_->named) {  // the wrapped source's own restore: its checks, its warning
      stage_->named->load_state(position_entries(point));
    } else if (point.pass != 0 || point.position != 0) {
      resume_at(point);
    }
  };
  callbacks.push_back(std::make_shared<StagingCallback>(
      [this] { return position_entries(consumed()); }, load_state, [this] { release_all(); }));
  return callbacks;
}

bool StagingInput::stage_one() {
  Stage& s = *stage_;
  if (s.error || s.exhausted) return false;
  Stage::Entry e;
  try {
    e.host = input_->next_batch();
  } catch (const DataExhausted& end) {
    s.exhausted = end.what();
    return false;
  } catch (...) {
    s.error = std::current_exception();
    return false;
  }
  e.at = input_->consumed();
  if (s.side) {  // CUDA
    // A source that does not pin (QueueInput pinned these on its thread) is pinned here.
    for (auto& t : e.host) {
      if (t.defined() && t.is_cpu() && !t.is_pinned()) t = t.pin_memory();
    }
    const at::TensorOptions to = at::TensorOptions().device(c10::kCUDA, s.device_index);
    // Allocated and copied on the side stream: the memory belongs to its pool.
    detail::run_on(*s.side, [&] {
      e.batch.reserve(e.host.size());
      for (const auto& t : e.host) {
        e.batch.push_back(t.defined() ? t.to(to, /*non_blocking=*/true) : t);
      }
    });
    if (s.spare.empty()) {
      e.copied.emplace();
    } else {
      e.copied.emplace(std::move(s.spare.back()));
      s.spare.pop_back();
    }
    e.copied->record(*s.side);
    s.ahead.push_back(std::move(e));
    return true;
  }
  e.batch.swap(e.host);  // the CPU: the wrapped source's own tensors
  s.ahead.push_back(std::move(e));
  return true;
}

void StagingInput::release_taken() {
  Stage& s = *stage_;
  if (!s.taken) return;
  // The lifetime rule (no record_stream): the taken batch's device memory belongs to the side
  // stream's pool, and the compute stream may still be reading it (its kernels are queued, not
  // run). Once the side stream waits for the compute stream's present point, any later use of
  // that memory by the side stream (the caching allocator hands it to a later copy, on the side
  // stream only) runs after the step. The pinned host tensors go with it: their copy was queued
  // on the side stream before, and LibTorch's pinned-memory allocator does not reuse a block
  // before the copies queued on it have run.
  if (s.side) {  // CUDA
    s.compute_passed.record(detail::CudaStream::current(s.device_index));
    s.compute_passed.block(*s.side);
  }
  s.taken.reset();
}

void StagingInput::release_all() {
  release_taken();
  // Staged batches were used by the side stream only: their memory is safe to hand to its later
  // work, which is queued after their copies.
  stage_->ahead.clear();
  stage_->released = true;
}

std::optional<Datapoint> StagingInput::_next_batch() {
  Stage& s = *stage_;
  if (s.released) {
    throw StopTraining(
        "StagingInput: training has ended (after_train released the staged batches); the "
        "source gives no more batches");
  }
  if (!s.filled) {
    s.filled = true;
    for (int64_t i = 0; i < options_.nr_stage(); ++i) {
      if (!stage_one()) break;
    }
  }
  release_taken();
  if (s.ahead.empty()) {
    if (s.error) std::rethrow_exception(s.error);
    return std::nullopt;
  }
  Stage::Entry e = std::move(s.ahead.front());
  s.ahead.pop_front();
  if (e.copied) {  // CUDA
    // The compute stream waits for the copy; the host does not.
    e.copied->block(detail::CudaStream::current(s.device_index));
    s.spare.push_back(std::move(*e.copied));
    e.copied.reset();
  }
  s.consumed = e.at;
  s.took_any = true;
  stage_one();  // the batch nr_stage ahead of this one
  Datapoint batch = e.batch;
  s.taken = std::move(e);
  return batch;
}

std::string StagingInput::end_of_data_reason() const {
  return stage_->exhausted ? *stage_->exhausted : std::string("the input has no more data");
}

}  // namespace trainpack
