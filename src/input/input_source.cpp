#include "trainpack/input/input_source.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <stdexcept>
#include <utility>

#include "trainpack/core/callback_state.h"
#include "trainpack/detail/input_sources.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace detail {

CallbackState position_entries(InputPosition p, const DataFlow& dataflow) {
  return {{"pass", state_scalar(p.pass)},
          {"position", state_scalar(p.position)},
          {"dataflow", state_string(dataflow.describe())}};
}

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
    TP_LOG_WARN(
        "{}Continuing anyway (allow_changed_input): the position is taken as a position "
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
        "needs a seekable flow: DataFromList (or FashionMnist), and BatchData, MapData or "
        "MultiThreadMapData (strict) over one.",
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

bool can_restore_position(const std::string& who, const DataFlow& dataflow, InputPosition point) {
  if (point.pass == 0 && point.position == 0) return true;
  const DataFlow* bad = dataflow.first_unseekable();
  if (bad == nullptr) return true;
  TP_LOG_WARN(
      "{}: the checkpoint's data position (batch {} of pass {}) is not restored: the dataflow {} "
      "cannot seek{}; the data starts from its beginning (as in tensorpack). For an exact resume "
      "use a seekable flow: DataFromList (or FashionMnist), and BatchData, MapData or "
      "MultiThreadMapData (strict) over one.",
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

}  // namespace detail

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
  return {std::make_shared<detail::SourceCallback>(
      "FeedInput",
      [this] {
        dataflow_->reset_state();
        reset_done_ = true;
      },
      nullptr, [this] { return detail::position_entries(consumed(), *dataflow_); },
      [this](const CallbackState& state) {
        check_state_keys(name(), state, {"pass", "position", "dataflow"});
        detail::check_same_dataflow(name(), state, *dataflow_, allow_changed_input());
        const InputPosition point = detail::read_position(name(), state);
        if (detail::can_restore_position(name(), *dataflow_, point)) resume_at(point);
      })};
}

void FeedInput::resume_at(InputPosition point) {
  if (started_) {
    throw std::logic_error(
        "FeedInput::resume_at called after the first batch; a restore happens before training");
  }
  detail::check_resume_point(name(), *dataflow_, point);
  resume_ = point;
  consumed_ = point;
}

std::optional<Datapoint> FeedInput::_next_batch() {
  if (!reset_done_) {
    throw std::logic_error(detail::not_driven_message(name(), "the dataflow was not reset"));
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

}  // namespace trainpack
