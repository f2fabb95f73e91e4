#include "trainpack/input/input_source.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <cmath>
#include <functional>
#include <stdexcept>
#include <utility>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/tower_registry.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

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
CallbackState position_entries(InputPosition p, const DataFlow& dataflow) {
  return {{"pass", state_scalar(p.pass)},
          {"position", state_scalar(p.position)},
          {"dataflow", state_string(dataflow.describe())}};
}

// For a load_state: the checkpoint's position counts batches of the dataflow it was saved with.
// Another one (a batch size, a data set of another size, another chain) would have the position
// reinterpreted: refused, unless `allow` (then a warning). Checkpoints without the entry (saved
// before it existed) are not checked.
void check_same_dataflow(const std::string& who, const CallbackState& state,
                         const DataFlow& dataflow, bool allow) {
  if (state.count("dataflow") == 0) return;
  const std::string saved = state_string(who, state, "dataflow");
  const std::string now = dataflow.describe();
  if (saved == now) return;
  const std::string what = fmt::format(
      "{}: the checkpoint's data position counts batches of another input: it was saved over\n"
      "  {}\nand this run reads\n  {}\n",
      who, saved, now);
  if (allow) {
    TP_LOG_WARN("{}Continuing anyway (allow_changed_input): the position is taken as a position "
                "in this run's input, and the epochs count this run's batches.",
                what);
    return;
  }
  throw std::invalid_argument(
      what +
      "Resuming would reinterpret the saved position (and the epochs' length). Resume with the "
      "batch size and data of the run that saved it; or continue anyway with "
      "TrainConfig().allow_changed_input(true); or start over in a new directory.");
}

InputPosition read_position(const std::string& who, const CallbackState& state) {
  InputPosition p;
  p.pass = state_int(who, state, "pass");
  p.position = state_int(who, state, "position");
  return p;
}

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

// The checks of resume_at, done at restore time (before_train is too late for a clear message).
void check_resume_point(const std::string& who, const DataFlow& dataflow, InputPosition point) {
  if (point.pass < 0 || point.position < 0) {
    throw std::invalid_argument(
        fmt::format("{}: cannot resume at pass {}, batch {}: both must be >= 0", who, point.pass,
                    point.position));
  }
  if (point.pass == 0 && point.position == 0) return;  // the start: nothing to skip
  if (const DataFlow* bad = dataflow.first_unseekable()) {
    throw std::invalid_argument(fmt::format(
        "{}: cannot resume at batch {} of pass {}: the dataflow {} cannot seek{}. Exact resume "
        "needs a seekable flow: DataFromList (or FashionMnist), and BatchData or MapData over "
        "one.",
        who, point.position, point.pass, dataflow.name(),
        bad == &dataflow ? std::string() : fmt::format(" ({} inside it cannot)", bad->name())));
  }
  if (const std::optional<int64_t> n = dataflow.size(); n && point.position > *n) {
    throw std::invalid_argument(fmt::format(
        "{}: cannot resume at batch {} of pass {}: a pass of the dataflow {} has {} batches; the "
        "checkpoint was saved with another dataflow (batch size or data)",
        who, point.position, point.pass, dataflow.name(), *n));
  }
}

// For a load_state: whether the checkpoint's position can be restored. A flow that cannot seek
// starts from its beginning instead (tensorpack's behaviour: it never restores the data), with a
// warning, so that AutoResumeTrainConfig works with any dataflow.
bool can_restore_position(const std::string& who, const DataFlow& dataflow, InputPosition point) {
  if (point.pass == 0 && point.position == 0) return true;
  const DataFlow* bad = dataflow.first_unseekable();
  if (bad == nullptr) return true;
  TP_LOG_WARN(
      "{}: the checkpoint's data position (batch {} of pass {}) is not restored: the dataflow {} "
      "cannot seek{}; the data starts from its beginning (as in tensorpack). For an exact resume "
      "use a seekable flow: DataFromList (or FashionMnist), and BatchData or MapData over one.",
      who, point.position, point.pass, dataflow.name(),
      bad == &dataflow ? std::string() : fmt::format(" ({} inside it cannot)", bad->name()));
  return false;
}

std::string not_driven_message(const std::string& source, const char* what) {
  return fmt::format(
      "{}::next_batch(): {}; register the callbacks that setup() returned with the trainer "
      "(Trainer::register_callback, before train()): they prepare the source in before_train",
      source, what);
}

}  // namespace

// ---- InputSource ----

InputSource::~InputSource() = default;

InputPosition InputSource::consumed() const { return InputPosition{}; }

void InputSource::resume_at(InputPosition /*point*/) {
  throw std::logic_error(fmt::format(
      "{} cannot start at a position in its data (resume_at); use FeedInput or QueueInput",
      name()));
}

std::vector<CallbackPtr> InputSource::setup(const InputSignature& signature, c10::Device device) {
  if (setup_done_) {
    throw std::logic_error(
        fmt::format("Method {}.setup can only be called once per object!", name()));
  }
  if (device.is_cuda()) {
    if (!torch::cuda::is_available()) {
      throw std::runtime_error(fmt::format(
          "{}: the device is {}, but no GPU is available (torch::cuda::is_available() is false); "
          "use the CPU device (c10::Device(c10::kCPU))",
          name(), device.str()));
    }
    const auto count = static_cast<int64_t>(torch::cuda::device_count());
    if (device.has_index() && device.index() >= count) {
      throw std::invalid_argument(
          fmt::format("{}: the device is {}, but only {} GPU(s) are available (cuda:0 to cuda:{})",
                      name(), device.str(), count, count - 1));
    }
  } else if (!device.is_cpu()) {
    throw std::invalid_argument(fmt::format(
        "{}: device {} is not supported; use the CPU or a CUDA device", name(), device.str()));
  }
  signature_ = signature;
  device_ = device;
  setup_done_ = true;
  std::vector<CallbackPtr> callbacks = _setup();
  for (const auto& cb : callbacks) cb->set_chief_only(false);
  return callbacks;
}

std::vector<at::Tensor> InputSource::next_batch() {
  if (!setup_done_) {
    throw std::logic_error(fmt::format(
        "{}::next_batch() called before setup(); the trainer calls setup(signature, device) "
        "when it is set up (or call it yourself and register the callbacks it returns)",
        name()));
  }
  std::optional<Datapoint> batch = _next_batch();
  if (!batch) throw DataExhausted(name() + ": " + end_of_data_reason());
  check_inputs(signature_, *batch, name());
  return to_device(std::move(*batch));
}

std::vector<at::Tensor> InputSource::to_device(Datapoint batch) const {
  if (device_.is_cpu()) return batch;
  for (auto& t : batch) {
    if (!t.defined() || t.device() == device_) continue;
    if (t.is_cpu() && !t.is_pinned()) t = t.pin_memory();
    t = t.to(at::TensorOptions().device(device_), /*non_blocking=*/true);
  }
  return batch;
}

// ---- FeedInput ----

FeedInput::FeedInput(DataFlowPtr dataflow) : dataflow_(std::move(dataflow)) {
  if (!dataflow_) {
    throw std::invalid_argument(
        "FeedInput: the dataflow is null; pass one, e.g. std::make_shared<BatchData>(ds, 32)");
  }
}

std::vector<CallbackPtr> FeedInput::_setup() {
  return {std::make_shared<SourceCallback>(
      "FeedInput",
      [this] {
        dataflow_->reset_state();
        reset_done_ = true;
      },
      nullptr, [this] { return position_entries(consumed(), *dataflow_); },
      [this](const CallbackState& state) {
        check_state_keys(name(), state, {"pass", "position", "dataflow"});
        check_same_dataflow(name(), state, *dataflow_, allow_changed_input());
        const InputPosition point = read_position(name(), state);
        if (can_restore_position(name(), *dataflow_, point)) resume_at(point);
      })};
}

void FeedInput::resume_at(InputPosition point) {
  if (started_) {
    throw std::logic_error(
        "FeedInput::resume_at called after the first batch; a restore happens before training");
  }
  check_resume_point(name(), *dataflow_, point);
  resume_ = point;
  consumed_ = point;
}

std::optional<Datapoint> FeedInput::_next_batch() {
  if (!reset_done_) {
    throw std::logic_error(not_driven_message(name(), "the dataflow was not reset"));
  }
  if (!started_) {
    started_ = true;
    if (resume_) {
      dataflow_->begin_pass(resume_->pass);
      if (resume_->position > 0) dataflow_->seek(resume_->position);
      pass_yielded_ = resume_->position > 0;  // a pass seeked to its end continues with the next
    } else {
      dataflow_->begin_pass();  // pass 0
      pass_yielded_ = false;
    }
  }
  for (;;) {
    std::optional<Datapoint> dp = dataflow_->next();
    if (dp) {
      pass_yielded_ = true;
      consumed_ = InputPosition{dataflow_->pass(), dataflow_->position()};
      return dp;
    }
    if (!pass_yielded_) return std::nullopt;  // a pass that yields nothing: no more data
    dataflow_->begin_pass();
    pass_yielded_ = false;
  }
}

std::string FeedInput::end_of_data_reason() const {
  return fmt::format("the dataflow {} has no more data: pass {} yielded no datapoint",
                     dataflow_->name(), dataflow_->pass());
}

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
    CallbackState s = position_entries(consumed(), *dataflow_);
    summary->add_state(&s);
    return s;
  };
  auto load_state = [this, summary](const CallbackState& s) {
    check_state_keys(name(), s,
                     {"pass", "position", "dataflow", "queue_size_biased", "queue_size_updates"});
    check_same_dataflow(name(), s, *dataflow_, allow_changed_input());
    const InputPosition position = read_position(name(), s);
    const auto ema = QueueSizeSummary::read_state(name(), s);
    if (can_restore_position(name(), *dataflow_, position)) resume_at(position);
    if (ema) summary->load(*ema);
  };
  return {std::make_shared<SourceCallback>(
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
  check_resume_point(name(), *dataflow_, point);
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
    throw std::logic_error(not_driven_message(name(), "the prefetch thread was not started"));
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
