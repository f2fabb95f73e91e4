#include "trainpack/callbacks/monitor_base.h"

#include <stdexcept>

#include "trainpack/train/trainer.h"

namespace trainpack {

Monitors::Monitors(std::vector<MonitorPtr> monitors) : monitors_(std::move(monitors)) {
  for (const auto& m : monitors_) {
    if (!m) throw std::invalid_argument("Monitors: a monitor is null");
  }
  set_chief_only_flag(false);
}

void Monitors::put_scalar(const std::string& name, double value) {
  for (const auto& m : monitors_) m->process_scalar(name, value);
  history_[name].emplace_back(is_set_up() ? global_step() : 0, value);
}

const Monitors::History& Monitors::get_history(const std::string& name) const {
  static const History kEmpty;
  auto it = history_.find(name);
  return it == history_.end() ? kEmpty : it->second;
}

double Monitors::get_latest(const std::string& name) const {
  const History& h = get_history(name);
  if (h.empty()) throw std::out_of_range("No available data for the key: " + name);
  return h.back().second;
}

}  // namespace trainpack
