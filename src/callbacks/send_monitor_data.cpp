#include "trainpack/callbacks/send_monitor_data.h"

#include "trainpack/utils/logger.h"

namespace trainpack {

SendMonitorData::SendMonitorData(std::string command, std::vector<std::string> names)
    : command_("SendMonitorData", std::move(command), std::move(names)),
      values_(command_.names().size()) {
  filled_.reserve(values_.size());
}

void SendMonitorData::process_scalar(const std::string& name, double value) {
  const int i = command_.index_of(name);
  if (i >= 0) values_[static_cast<size_t>(i)] = value;
}

void SendMonitorData::_trigger() {
  filled_.clear();
  for (const auto& v : values_) {
    if (!v) return;  // keep waiting until every stat has a value
    filled_.push_back(*v);
  }
  const std::string cmd = command_.fill(filled_);
  const int ret = run_shell_command(cmd);
  if (ret != 0) TP_LOG_ERROR("Command '{}' failed with ret={}!", cmd, ret);
  for (auto& v : values_) v.reset();
}

}  // namespace trainpack
