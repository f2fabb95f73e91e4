// Miscellaneous callbacks (tensorpack's callbacks/misc.py): EstimatedTimeLeft, SendStat, and
// InjectShell (in trainpack/callbacks/inject_shell.h, included here).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "trainpack/callbacks/inject_shell.h"
#include "trainpack/core/callback.h"
#include "trainpack/utils/clock.h"
#include "trainpack/utils/command_template.h"

namespace trainpack {

// tensorpack's EstimatedTimeLeft: logs `Estimated Time Left: 1 hour 2 minutes 3 seconds` after
// every epoch but the last: the median (or mean) of the last `last_k_epochs` epoch durations
// times the epochs left. An epoch is timed from one trigger_epoch to the next (from before_train
// for the first), its epoch-end callbacks included; trigger_epoch is overridden, so PeriodicTrigger
// cannot schedule it. State (checkpoints): `epoch_seconds`, the durations kept, so the first
// estimate after a resume uses the epochs before it. chief_only: true.
// Errors: std::invalid_argument if last_k_epochs < 1. `clock`: seconds from any fixed point, for
// tests.
class EstimatedTimeLeft : public Callback {
 public:
  explicit EstimatedTimeLeft(int last_k_epochs = 5, bool median = true, Clock clock = {});

  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

 protected:
  void _before_train() override;
  void _trigger_epoch() override;

 private:
  double now() const;

  size_t last_k_epochs_;
  bool median_;
  Clock clock_;
  int64_t max_epoch_ = 0;
  double last_time_ = 0;
  std::deque<double> times_;
};

// tensorpack's SendStat: at every trigger (every epoch end by default), runs a shell command with
// each `{name}` replaced by `monitors().get_latest(name)` (Python's repr(float); CommandTemplate),
// through /bin/sh; the training thread waits for it. Logs ERR `Command <cmd> failed with
// ret=<ret>!` on a non-zero exit status (training goes on), and WRN `[SendStat] No value of the
// stat '<name>' in the monitors yet; the command is not run.` chief_only: true.
// Errors: std::invalid_argument at construction for an unknown placeholder (not in `names`) or an
// unbalanced brace. See docs/monitors.md, "Running a command with the statistics".
class SendStat : public Callback {
 public:
  SendStat(std::string command, std::vector<std::string> names);

 protected:
  void _trigger() override;

 private:
  CommandTemplate command_;
};

}  // namespace trainpack
