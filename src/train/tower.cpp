#include "trainpack/train/tower.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <stdexcept>

#include <torch/nn/module.h>

#include "trainpack/train/step_context.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

std::string dtype_name(at::ScalarType t) {
  std::string s = c10::toString(t);  // "Float", "Long"
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string shape_string(at::IntArrayRef sizes) {
  return fmt::format("[{}]", fmt::join(sizes.begin(), sizes.end(), ", "));
}

}  // namespace

InputDesc::InputDesc(std::string name_, std::vector<int64_t> shape_, at::ScalarType dtype_)
    : name(std::move(name_)), shape(std::move(shape_)), dtype(dtype_) {
  if (name.empty()) throw std::invalid_argument("InputDesc: the name is empty");
  for (int64_t d : shape) {
    if (d < -1) {
      throw std::invalid_argument(fmt::format(
          "InputDesc('{}'): dimension {} is invalid; use -1 for a dimension of any size", name, d));
    }
  }
}

bool InputDesc::matches(const at::Tensor& t) const {
  if (!t.defined() || t.scalar_type() != dtype) return false;
  if (t.dim() != static_cast<int64_t>(shape.size())) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != -1 && shape[i] != t.size(static_cast<int64_t>(i))) return false;
  }
  return true;
}

std::string InputDesc::to_string() const {
  return fmt::format("{}: [{}] {}", name, fmt::join(shape, ", "), dtype_name(dtype));
}

void check_inputs(const InputSignature& signature, const std::vector<at::Tensor>& batch,
                  const std::string& who) {
  if (batch.size() != signature.size()) {
    std::vector<std::string> names;
    for (const auto& d : signature) names.push_back(d.name);
    throw std::invalid_argument(fmt::format(
        "{}: the batch has {} components, but the input signature has {} ({}); the dataflow "
        "must produce one component per input, in the signature's order",
        who, batch.size(), signature.size(), fmt::join(names, ", ")));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const InputDesc& d = signature[i];
    if (d.matches(batch[i])) continue;
    if (!batch[i].defined()) {
      throw std::invalid_argument(
          fmt::format("{}: input '{}' (component {}) is an undefined tensor", who, d.name, i));
    }
    throw std::invalid_argument(
        fmt::format("{}: input '{}' (component {}) should be [{}] {}, but the batch has {} {}", who,
                    d.name, i, fmt::join(d.shape, ", "), dtype_name(d.dtype),
                    shape_string(batch[i].sizes()), dtype_name(batch[i].scalar_type())));
  }
}

// ---- TowerRegistry ----

at::Tensor TowerRegistry::MovingAverage::average() const {
  if (!biased.defined() || updates == 0) return at::Tensor();
  return biased / (1.0 - std::pow(decay, static_cast<double>(updates)));
}

void TowerRegistry::record_summary(std::string_view tag, SummaryKind kind, const at::Tensor& value,
                                   int64_t max_outputs) {
  record_summary(tag, "", kind, value, max_outputs);
}

void TowerRegistry::record_summary(std::string_view name, std::string_view suffix, SummaryKind kind,
                                   const at::Tensor& value, int64_t max_outputs) {
  for (auto& e : summaries_) {
    const std::string_view tag(e.tag);
    if (tag.size() == name.size() + suffix.size() && tag.substr(0, name.size()) == name &&
        tag.substr(name.size()) == suffix) {
      if (e.kind != kind) {
        throw std::invalid_argument(
            fmt::format("TowerContext: summary '{}' was recorded before with another kind", tag));
      }
      e.value = value;
      e.max_outputs = max_outputs;
      return;
    }
  }
  SummaryEntry e;
  e.tag = std::string(name) + std::string(suffix);
  e.kind = kind;
  e.value = value;
  e.max_outputs = max_outputs;
  summaries_.push_back(std::move(e));
}

void TowerRegistry::record_moving(std::string_view name, const at::Tensor& value, double decay) {
  if (!value.defined()) {
    throw std::invalid_argument(
        fmt::format("TowerContext::add_moving_summary('{}'): the tensor is undefined", name));
  }
  if (value.numel() != 1) {
    throw std::invalid_argument(fmt::format(
        "TowerContext::add_moving_summary('{}'): the tensor must be a scalar, but has shape {}",
        name, shape_string(value.sizes())));
  }
  if (!(decay >= 0.0 && decay < 1.0)) {
    throw std::invalid_argument(fmt::format(
        "TowerContext::add_moving_summary('{}'): decay must be in [0, 1), got {}", name, decay));
  }
  for (auto& m : moving_) {
    if (m.name == name) {
      m.latest = value;
      return;
    }
  }
  MovingAverage m;
  m.name = std::string(name);
  m.decay = decay;
  m.latest = value;
  for (auto it = restored_moving_.begin(); it != restored_moving_.end(); ++it) {
    if (it->name != name) continue;
    if (it->decay == decay) {  // continue from the checkpoint, on the value's device
      m.biased = at::full({}, it->biased, value.options().dtype(at::kFloat).requires_grad(false));
      m.updates = it->updates;
    } else {
      TP_LOG_WARN(
          "MovingAverageSummary: the moving average '{}' was saved with decay {}, but the tower "
          "now uses decay {}; it starts again",
          name, it->decay, decay);
    }
    restored_moving_.erase(it);
    break;
  }
  moving_.push_back(std::move(m));
}

void TowerRegistry::record_update_op(std::string_view name, std::function<void()> op) {
  if (!op) {
    throw std::invalid_argument(
        fmt::format("TowerContext::add_update_op('{}'): the op is empty", name));
  }
  for (auto& u : update_ops_) {
    if (u.name == name) {
      u.op = std::move(op);
      return;
    }
  }
  update_ops_.push_back(UpdateOp{std::string(name), std::move(op)});
}

size_t TowerRegistry::update_moving_averages() {
  at::NoGradGuard no_grad;
  size_t n = 0;
  for (auto& m : moving_) {
    if (!m.latest.defined()) continue;
    // The common case (a 0-dim float32 loss) goes straight into lerp_ and allocates nothing.
    at::Tensor x = m.latest;
    if (x.dim() != 0) x = x.reshape({});
    if (x.scalar_type() != at::kFloat) x = x.to(at::kFloat);
    if (!m.biased.defined() || m.biased.device() != x.device()) {
      m.biased = at::zeros({}, x.options().requires_grad(false));
      m.updates = 0;
    }
    // biased_t = decay * biased_{t-1} + (1 - decay) * x_t, in place on x's device.
    m.biased.lerp_(x, 1.0 - m.decay);
    ++m.updates;
    ++n;
  }
  return n;
}

void TowerRegistry::run_update_ops() {
  for (auto& u : update_ops_) {
    if (u.op) u.op();
  }
}

std::vector<std::string> TowerRegistry::update_op_names() const {
  std::vector<std::string> names;
  for (const auto& u : update_ops_) names.push_back(u.name);
  return names;
}

std::vector<TowerRegistry::MovingAverageState> TowerRegistry::moving_average_states() const {
  std::vector<MovingAverageState> out;
  for (const auto& m : moving_) {
    if (m.updates == 0 || !m.biased.defined()) continue;
    out.push_back(MovingAverageState{m.name, m.decay, m.biased.item<double>(), m.updates});
  }
  out.insert(out.end(), restored_moving_.begin(), restored_moving_.end());
  return out;
}

void TowerRegistry::restore_moving_averages(std::vector<MovingAverageState> states) {
  restored_moving_.clear();
  for (auto& s : states) {
    MovingAverage* existing = nullptr;
    for (auto& m : moving_) {
      if (m.name == s.name) existing = &m;
    }
    if (existing == nullptr) {
      restored_moving_.push_back(std::move(s));
    } else if (existing->decay == s.decay) {
      const at::Device device = existing->biased.defined()   ? existing->biased.device()
                                : existing->latest.defined() ? existing->latest.device()
                                                             : at::Device(at::kCPU);
      existing->biased =
          at::full({}, s.biased, at::TensorOptions().dtype(at::kFloat).device(device));
      existing->updates = s.updates;
    } else {
      TP_LOG_WARN(
          "MovingAverageSummary: the moving average '{}' was saved with decay {}, but the tower "
          "uses decay {}; it starts again",
          s.name, s.decay, existing->decay);
    }
  }
}

void TowerRegistry::end_step() {
  for (auto& e : summaries_) e.value.reset();
  for (auto& m : moving_) m.latest.reset();
  for (auto& u : update_ops_) u.op = nullptr;
}

// ---- TowerContext ----

TowerContext::TowerContext(std::string name, bool is_training, StepContext* step,
                           TowerRegistry* registry)
    : name_(std::move(name)), is_training_(is_training), step_(step), registry_(registry) {}

void TowerContext::output(std::string_view name, const at::Tensor& tensor) {
  if (step_ != nullptr) {
    step_->publish(name, tensor);
  } else if (output_names_.find(name) == output_names_.end()) {
    output_names_.emplace(name);
  }
  if (collect_names_ != nullptr) {
    for (size_t i = 0; i < collect_names_->size(); ++i) {
      if ((*collect_names_)[i] == name) (*collected_)[i] = tensor;
    }
  }
}

void TowerContext::summary_scalar(std::string_view name, const at::Tensor& tensor) {
  if (!is_main_training_tower()) return;
  if (tensor.defined() && tensor.numel() != 1) {
    throw std::invalid_argument(fmt::format(
        "TowerContext::summary_scalar('{}'): the tensor must be a scalar, but has shape {}", name,
        shape_string(tensor.sizes())));
  }
  registry_->record_summary(name, "-summary", TowerRegistry::SummaryKind::kScalar, tensor);
}

void TowerContext::summary_histogram(std::string_view name, const at::Tensor& tensor) {
  if (!is_main_training_tower()) return;
  registry_->record_summary(name, "-histogram", TowerRegistry::SummaryKind::kHistogram, tensor);
}

void TowerContext::summary_image(std::string_view name, const at::Tensor& tensor,
                                 int64_t max_outputs) {
  if (!is_main_training_tower()) return;
  if (max_outputs < 1) {
    throw std::invalid_argument(fmt::format(
        "TowerContext::summary_image('{}'): max_outputs must be >= 1, got {}", name, max_outputs));
  }
  registry_->record_summary(name, "", TowerRegistry::SummaryKind::kImage, tensor, max_outputs);
}

void TowerContext::add_moving_summary(std::string_view name, const at::Tensor& tensor,
                                      double decay) {
  if (!is_main_training_tower()) return;
  registry_->record_moving(name, tensor, decay);
}

void TowerContext::add_update_op(std::string_view name, std::function<void()> op) {
  if (!is_main_training_tower()) return;
  registry_->record_update_op(name, std::move(op));
}

torch::nn::Module& TowerContext::module() const {
  if (module_ == nullptr) {
    throw std::logic_error(
        fmt::format("TowerContext '{}': no module was given to this context (set_module)", name_));
  }
  module_used_ = true;
  return *module_;
}

void TowerContext::throw_module_type_mismatch() const {
  throw std::invalid_argument(fmt::format(
      "TowerContext '{}': module_as<T>(): the module is not of the requested type; use the Impl "
      "class of the module given to the trainer (e.g. module_as<NetImpl>())",
      name_));
}

void TowerContext::check_collected_outputs(const std::string& who, const std::string& why) const {
  if (collect_names_ == nullptr || collected_ == nullptr) return;
  for (size_t i = 0; i < collect_names_->size(); ++i) {
    if ((*collected_)[i].defined()) continue;
    throw std::invalid_argument(fmt::format(
        "{}: the tower did not output '{}'{}; it outputs: {}", who, (*collect_names_)[i], why,
        output_names_.empty() ? std::string("(nothing)")
                              : fmt::format("{}", fmt::join(output_names_, ", "))));
  }
}

void TowerContext::check_module_used(const std::string& who, const std::string& device) const {
  if (module_used_) return;
  throw std::invalid_argument(fmt::format(
      "{}: the tower function does not take its module from the TowerContext, so it would run "
      "the training module instead of the replica on {}; use `auto& net = "
      "ctx.module_as<NetImpl>()` in the tower function",
      who, device));
}

void TowerContext::collect_outputs(const std::vector<std::string>* names,
                                   std::vector<at::Tensor>* out) {
  collect_names_ = names;
  collected_ = out;
  if (out != nullptr && names != nullptr) {
    out->assign(names->size(), at::Tensor());
  }
}

}  // namespace trainpack
