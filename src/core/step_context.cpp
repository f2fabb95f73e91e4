#include "trainpack/core/step_context.h"

#include <fmt/format.h>

#include <stdexcept>

#include "trainpack/core/trainer.h"

namespace trainpack {

void StepContext::request_stop() const { trainer_->request_stop(); }

bool StepContext::stop_requested() const { return trainer_->stop_requested(); }

const at::Tensor& StepContext::fetched(std::string_view name) const {
  for (const auto& entry : requested_) {
    if (entry.first == name) return entry.second;
  }
  throw std::out_of_range(fmt::format(
      "RunValues: '{}' was not requested in this step; ask for it in before_run", name));
}

std::vector<std::string> StepContext::missing_names() const {
  std::vector<std::string> out;
  for (const auto& entry : requested_) {
    if (!entry.second.defined()) out.push_back(entry.first);
  }
  return out;
}

}  // namespace trainpack
