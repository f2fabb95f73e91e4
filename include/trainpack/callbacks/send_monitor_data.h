// SendMonitorData: a monitor that runs a shell command with the latest values of some stats, as
// soon as all of them have been put since the last run (tensorpack's callbacks/monitor.py).
//
//   // Append "epoch-end accuracy" lines to a file whenever both values are fresh:
//   monitors.push_back(std::make_shared<SendMonitorData>(
//       "echo {val-accuracy} {Throughput (steps/sec)} >> /tmp/acc.txt",
//       std::vector<std::string>{"val-accuracy", "Throughput (steps/sec)"}));
//
// When: process_scalar keeps the last value of each named stat; trigger_step and trigger (every
// epoch end) run the command when every name has a value, then forget the values (so the next
// run waits for all of them again). A missing name means: wait, do nothing.
// Logs: ERR `Command '<cmd>' failed with ret=<ret>!` when the command exits with a non-zero
// status (training goes on). The command runs through /bin/sh; the training thread waits for it.
// chief_only: false (a monitor). Pass it in the monitors list, not the callbacks.
// Errors: std::invalid_argument at construction for an unknown placeholder or an unbalanced
// brace (see CommandTemplate in trainpack/utils/command_template.h).
//
// Differences from tensorpack: the command gets numbers only, formatted as Python's repr(float)
// (as `str.format` does with Python floats); a bad template fails at construction; `ret` is the
// shell's exit status (tensorpack prints os.system's wait status: 256 for exit status 1), or -N
// when the shell was killed by signal N.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainpack/core/monitor_base.h"
#include "trainpack/utils/command_template.h"

namespace trainpack {

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
