#include "trainpack/train/tower.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include <torch/nn/module.h>

#include "trainpack/core/step_context.h"

namespace trainpack {

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

void TowerContext::output_returned_cost(const at::Tensor& cost) {
  if (!cost.defined() || output_names_.find("cost") != output_names_.end()) return;
  output("cost", cost);
}

void TowerContext::summary_scalar(std::string_view name, const at::Tensor& tensor) {
  if (!is_main_training_tower()) return;
  if (tensor.defined() && tensor.numel() != 1) {
    throw std::invalid_argument(fmt::format(
        "TowerContext::summary_scalar('{}'): the tensor must be a scalar, but has shape {}", name,
        fmt::format("[{}]", fmt::join(tensor.sizes(), ", "))));
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
