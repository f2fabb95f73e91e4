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

// Logs how long the remaining epochs will take, from the duration of the last epochs.
//
//   callbacks.push_back(std::make_shared<EstimatedTimeLeft>());
//
// When: before_train remembers the time; trigger_epoch (overridden, so PeriodicTrigger cannot
// schedule it) takes the time since the previous one (the whole epoch, its epoch-end callbacks
// included), keeps the last `last_k_epochs` durations, and multiplies their median (or mean) by
// the number of epochs left.
// Logs: `Estimated Time Left: 1 hour 2 minutes 3 seconds` after every epoch but the last.
// chief_only: true.
// Errors: std::invalid_argument if last_k_epochs < 1.
// State (checkpoints): `epoch_seconds` (float64 [n], the durations kept, oldest first, n <=
// last_k_epochs; a longer saved list keeps its last last_k_epochs), so the first estimate after a
// resume uses the epochs before it. The time of the interruption itself counts in no epoch: the
// first epoch after a resume is timed from its before_train.
//
// Differences from tensorpack: none (`clock` is for tests: seconds from any fixed point).
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

// Runs a shell command with the latest values of some stats at every trigger (every epoch end).
//
//   callbacks.push_back(std::make_shared<SendStat>(
//       "notify-send 'acc={val-accuracy}'", std::vector<std::string>{"val-accuracy"}));
//
// When: trigger. Each `{name}` placeholder is replaced by `monitors().get_latest(name)`, written
// as Python's repr(float) (numbers only; see CommandTemplate); the command runs through /bin/sh
// and the training thread waits for it.
// Logs: ERR `Command <cmd> failed with ret=<ret>!` on a non-zero exit status (training goes on);
// WRN `[SendStat] No value of the stat '<name>' in the monitors yet; the command is not run.` when
// a name has no value.
// chief_only: true.
// Errors: std::invalid_argument at construction for an unknown placeholder (not in `names`) or an
// unbalanced brace.
//
// Differences from tensorpack: a stat without a value is a warning and the command is skipped
// (tensorpack raises KeyError and training fails); `ret` is the shell's exit status (tensorpack
// prints os.system's wait status, 256 for exit status 1), or -N when the shell was killed by
// signal N; a bad template fails at construction.
class SendStat : public Callback {
 public:
  SendStat(std::string command, std::vector<std::string> names);

 protected:
  void _trigger() override;

 private:
  CommandTemplate command_;
};

}  // namespace trainpack
