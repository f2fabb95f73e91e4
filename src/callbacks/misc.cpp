#include "trainpack/callbacks/misc.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/humanize.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

// ---- EstimatedTimeLeft ----

EstimatedTimeLeft::EstimatedTimeLeft(int last_k_epochs, bool median, Clock clock)
    : median_(median), clock_(std::move(clock)) {
  if (last_k_epochs < 1) {
    throw std::invalid_argument(
        fmt::format("EstimatedTimeLeft: last_k_epochs must be at least 1, got {}", last_k_epochs));
  }
  last_k_epochs_ = static_cast<size_t>(last_k_epochs);
}

double EstimatedTimeLeft::now() const { return read_clock(clock_, monotonic_seconds); }

void EstimatedTimeLeft::_before_train() {
  max_epoch_ = trainer().max_epoch();
  last_time_ = now();
}

void EstimatedTimeLeft::_trigger_epoch() {
  const double t = now();
  times_.push_back(t - last_time_);
  last_time_ = t;
  if (times_.size() > last_k_epochs_) times_.pop_front();
  double epoch_time;
  if (median_) {
    // numpy's median: the mean of the two middle values for an even count.
    std::vector<double> sorted(times_.begin(), times_.end());
    std::sort(sorted.begin(), sorted.end());
    const size_t m = sorted.size() / 2;
    epoch_time = sorted.size() % 2 ? sorted[m] : (sorted[m - 1] + sorted[m]) / 2;
  } else {
    epoch_time =
        std::accumulate(times_.begin(), times_.end(), 0.0) / static_cast<double>(times_.size());
  }
  const double left = static_cast<double>(max_epoch_ - epoch_num()) * epoch_time;
  if (left > 0) TP_LOG_INFO("Estimated Time Left: {}", humanize_time_delta(left));
}

CallbackState EstimatedTimeLeft::state() const {
  return {{"epoch_seconds", state_vector(std::vector<double>(times_.begin(), times_.end()))}};
}

void EstimatedTimeLeft::load_state(const CallbackState& state) {
  const std::string who = name();
  check_state_keys(who, state, {"epoch_seconds"});
  const std::vector<double> times = state_doubles(who, state, "epoch_seconds");
  const size_t first = times.size() > last_k_epochs_ ? times.size() - last_k_epochs_ : 0;
  times_.assign(times.begin() + static_cast<std::ptrdiff_t>(first), times.end());
}

// ---- SendStat ----

SendStat::SendStat(std::string command, std::vector<std::string> names)
    : command_("SendStat", std::move(command), std::move(names)) {}

void SendStat::_trigger() {
  const Monitors& monitors = trainer().monitors();
  std::vector<double> values;
  values.reserve(command_.names().size());
  for (const std::string& name : command_.names()) {
    if (monitors.get_history(name).empty()) {  // get_latest would throw
      TP_LOG_WARN(
          "[SendStat] No value of the stat '{}' in the monitors yet; the command is not run.",
          name);
      return;
    }
    values.push_back(monitors.get_latest(name));
  }
  const std::string cmd = command_.fill(values);
  const int ret = run_shell_command(cmd);
  if (ret != 0) TP_LOG_ERROR("Command {} failed with ret={}!", cmd, ret);
}

}  // namespace trainpack
