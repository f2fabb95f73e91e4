// SendMonitorData (tensorpack's callbacks/monitor.py): a monitor that runs a shell command with
// the latest values of some stats. See docs/monitors.md, "Running a command with the statistics".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainpack/core/monitor_base.h"
#include "trainpack/utils/command_template.h"

namespace trainpack {

// process_scalar keeps the last value of each named stat; trigger_step and trigger (every epoch
// end) run the command, through /bin/sh, when every name has a value since its last run, then
// forget the values. Placeholders are filled with numbers only, as Python's repr(float)
// (CommandTemplate, utils/command_template.h). The training thread waits for the command; a
// non-zero exit status is ERR `Command '<cmd>' failed with ret=<ret>!` and training goes on.
// chief_only: false (a monitor: pass it in the monitors, not the callbacks). Errors:
// std::invalid_argument at construction for an unknown placeholder or an unbalanced brace.
class SendMonitorData : public MonitorBase {
 public:
  SendMonitorData(std::string command, std::vector<std::string> names);

  void process_scalar(const std::string& name, double value) override;

 protected:
  void _trigger_step() override { _trigger(); }
  void _trigger() override;

 private:
  CommandTemplate command_;
  std::vector<std::optional<double>> values_;  // one per command_.names()
  std::vector<double> filled_;                 // reused buffer for fill()
};

}  // namespace trainpack
