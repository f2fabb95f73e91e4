#include "trainpack/input/queue_input.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <utility>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/tower_registry.h"
#include "trainpack/core/trainer.h"
#include "trainpack/detail/input_sources.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

constexpr const char* kQueueName = "QueueInput/input_queue";
constexpr const char* kQueueSizeTag = "QueueInput/queue_size";

// Records the zero-debiased EMA (decay 0.5, add_moving_summary's formula) of QueueInput's queue
// length as the scalar summary QueueInput/queue_size, in before_run of every hooked run. The
// value lives in one preallocated 0-dim tensor updated in place: nothing is allocated per step.
// The EMA is saved with QueueInput's own callback (entries `queue_size_biased`, float64, and
// `queue_size_updates`, int64): a state of this callback, named "QueueInput/queue_size", would
// be taken for entries of the callback "QueueInput".
class QueueSizeSummary : public Callback {
 public:
  explicit QueueSizeSummary(const QueueInput& source)
      : source_(source), value_(at::zeros({}, at::kFloat)) {}
  std::string name() const override { return kQueueSizeTag; }

  void add_state(CallbackState* state) const {
    (*state)["queue_size_biased"] = state_scalar(biased_);
    (*state)["queue_size_updates"] = state_scalar(updates_);
  }
  // Reads the EMA from `state` (nullopt when it has neither entry); std::invalid_argument naming
  // `who` and the entry on one that does not fit.
  static std::optional<std::pair<double, int64_t>> read_state(const std::string& who,
                                                              const CallbackState& state) {
    if (!state.count("queue_size_biased") && !state.count("queue_size_updates")) {
      return std::nullopt;
    }
    const double biased = state_double(who, state, "queue_size_biased");
    const int64_t updates = state_int(who, state, "queue_size_updates");
    if (updates < 0) {
      throw std::invalid_argument(fmt::format(
          "{}: the saved state entry 'queue_size_updates' is {}; expected >= 0", who, updates));
    }
    return std::make_pair(biased, updates);
  }
  void load(std::pair<double, int64_t> ema) {
    biased_ = ema.first;
    updates_ = ema.second;
    decay_power_ = std::pow(kDecay, static_cast<double>(updates_));  // exact for 0.5
  }

 protected:
  RunArgs _before_run(const StepContext& /*ctx*/) override {
    const double size = static_cast<double>(source_.queued());
    biased_ = kDecay * biased_ + (1.0 - kDecay) * size;
    decay_power_ *= kDecay;  // decay^t
    ++updates_;
    value_.fill_(biased_ / (1.0 - decay_power_));
    trainer().tower_registry().record_summary(kQueueSizeTag, TowerRegistry::SummaryKind::kScalar,
                                              value_);
    return RunArgs();
  }

 private:
  static constexpr double kDecay = 0.5;
  const QueueInput& source_;
  at::Tensor value_;
  double biased_ = 0.0;
  double decay_power_ = 1.0;
  int64_t updates_ = 0;
};

}  // namespace

// ---- QueueInput ----

QueueInput::QueueInput(DataFlowPtr dataflow, QueueInputOptions options)
    : dataflow_(std::move(dataflow)), options_(options) {
  if (!dataflow_) {
    throw std::invalid_argument(
        "QueueInput: the dataflow is null; pass one, e.g. std::make_shared<BatchData>(ds, 32)");
  }
  if (options_.capacity() < 1) {
    throw std::invalid_argument(fmt::format(
        "QueueInput: capacity must be >= 1, got {}; set QueueInputOptions().capacity(n) with "
        "n >= 1 (default 50)",
        options_.capacity()));
  }
}

QueueInput::~QueueInput() { stop(); }

std::vector<CallbackPtr> QueueInput::_setup() {
  TP_LOG_INFO("Setting up the queue '{}' for CPU prefetching ...", kQueueName);
  auto summary = std::make_shared<QueueSizeSummary>(*this);
  auto state = [this, summary] {
    CallbackState s = detail::position_entries(consumed(), *dataflow_);
    summary->add_state(&s);
    return s;
  };
  auto load_state = [this, summary](const CallbackState& s) {
    check_state_keys(name(), s,
                     {"pass", "position", "dataflow", "queue_size_biased", "queue_size_updates"});
    detail::check_same_dataflow(name(), s, *dataflow_, allow_changed_input());
    const InputPosition position = detail::read_position(name(), s);
    const auto ema = QueueSizeSummary::read_state(name(), s);
    if (detail::can_restore_position(name(), *dataflow_, position)) resume_at(position);
    if (ema) summary->load(*ema);
  };
  return {std::make_shared<detail::SourceCallback>(
              "QueueInput", [this] { start(); }, [this] { stop(); }, state, load_state),
          summary};
}

InputPosition QueueInput::consumed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return consumed_;
}

void QueueInput::resume_at(InputPosition point) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_ || stopping_) {
      throw std::logic_error(
          "QueueInput::resume_at called after start(); a restore happens before training");
    }
  }
  detail::check_resume_point(name(), *dataflow_, point);
  std::lock_guard<std::mutex> lock(mutex_);
  resume_ = point;
  consumed_ = point;
}

void QueueInput::start() {
  if (!setup_done()) {
    throw std::logic_error(
        "QueueInput::start() called before setup(); the trainer calls setup(signature, device) "
        "first");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_ || stopping_) {
      throw std::logic_error(fmt::format(
          "QueueInput::start(): the prefetch thread was {} before; a QueueInput feeds one "
          "training run",
          started_ ? "started" : "stopped"));
    }
  }
  dataflow_->reset_state();  // on this thread, before the producer exists
  // The first pass begins here, so that a failing seek fails before_train.
  bool pass_yielded = false;
  if (resume_) {
    dataflow_->begin_pass(resume_->pass);
    if (resume_->position > 0) dataflow_->seek(resume_->position);
    pass_yielded = resume_->position > 0;  // a pass seeked to its end continues with the next
  } else {
    dataflow_->begin_pass();  // pass 0
  }
  TP_LOG_INFO("Starting EnqueueThread {} ...", kQueueName);
  std::lock_guard<std::mutex> join_lock(join_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    started_ = true;
  }
  thread_ = std::thread([this, pass_yielded] { produce(pass_yielded); });
}

void QueueInput::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  not_full_.notify_all();
  not_empty_.notify_all();
  std::lock_guard<std::mutex> join_lock(join_mutex_);
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    throw std::logic_error("QueueInput::stop() called from its own prefetch thread (the dataflow)");
  }
  thread_.join();
  std::deque<Queued> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    joined_ = true;
    dropped.swap(queue_);
  }
  TP_LOG_INFO("EnqueueThread {} Exited.", kQueueName);
}

bool QueueInput::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return started_ && !joined_;
}

int64_t QueueInput::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

void QueueInput::produce(bool pass_yielded) {
  // set by setup() (and set_pin_host_batches before it), before the thread started
  const bool pin = device().is_cuda() || pin_host_batches();
  const auto capacity = static_cast<size_t>(options_.capacity());
  try {
    // start() has begun the first pass.
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) return;
      }
      std::optional<Datapoint> dp = dataflow_->next();  // outside the lock: may take long
      if (!dp) {
        if (!pass_yielded) {  // a pass that yields nothing: no more data
          {
            std::lock_guard<std::mutex> lock(mutex_);
            exhausted_ = true;
            exhausted_pass_ = dataflow_->pass();
          }
          not_empty_.notify_all();
          return;
        }
        dataflow_->begin_pass();
        pass_yielded = false;
        continue;
      }
      pass_yielded = true;
      const InputPosition at{dataflow_->pass(), dataflow_->position()};
      if (pin) {  // pinned here, so that the training thread's copy is asynchronous
        for (auto& t : *dp) {
          if (t.defined() && t.is_cpu() && !t.is_pinned()) t = t.pin_memory();
        }
      }
      {
        std::unique_lock<std::mutex> lock(mutex_);
        not_full_.wait(lock, [&] { return stopping_ || queue_.size() < capacity; });
        if (stopping_) return;
        queue_.push_back(Queued{std::move(*dp), at});
      }
      not_empty_.notify_one();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    not_empty_.notify_all();
  }
}

std::optional<Datapoint> QueueInput::_next_batch() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!started_) {
    throw std::logic_error(
        detail::not_driven_message(name(), "the prefetch thread was not started"));
  }
  not_empty_.wait(lock, [&] { return stopping_ || !queue_.empty() || error_ || exhausted_; });
  if (stopping_) {
    throw StopTraining("QueueInput: stop() was called; the queue gives no more batches");
  }
  if (!queue_.empty()) {
    Datapoint dp = std::move(queue_.front().batch);
    consumed_ = queue_.front().at;
    queue_.pop_front();
    lock.unlock();
    not_full_.notify_one();
    return dp;
  }
  if (error_) std::rethrow_exception(error_);
  return std::nullopt;
}

std::string QueueInput::end_of_data_reason() const {
  int64_t pass;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pass = exhausted_pass_;
  }
  return fmt::format("the dataflow {} has no more data: pass {} yielded no datapoint",
                     dataflow_->name(), pass);
}

}  // namespace trainpack
