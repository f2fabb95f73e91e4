// StatMonitorParamSetter (tensorpack's, callbacks/param.py): a hyperparameter changed when a
// monitored stat stops improving. The params and the base, HyperParamSetter, are in
// callbacks/param.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <torch/arg.h>

#include "trainpack/callbacks/param.h"

namespace trainpack {

struct StatMonitorParamSetterOptions {
  // Watch for the stat not increasing enough (instead of not decreasing enough).
  TORCH_ARG(bool, reverse) = false;
};

// tensorpack's StatMonitorParamSetter: sets the param to `value_func(current_value)` when the
// stat `stat_name` has not improved over its last `last_k` observations: `min(history) >=
// history[0] - threshold` (reverse: `max(history) <= history[0] + threshold`); then the history
// starts again. When: every trigger() (every epoch end by default), not before_train; it takes
// the stat's latest value, so it comes after the stat's producer. WARN when the stat has no value
// yet or none since the last trigger; a change logs `[StatMonitorParamSetter] Triggered, history
// of <stat>: ...`. State: HyperParamSetter's, plus the observations since the last change
// (`history_steps`, `history_values`; at most last_k), so a resume changes it at the same point.
class StatMonitorParamSetter : public HyperParamSetter {
 public:
  // Throws std::invalid_argument naming the class and the argument for a null param, an empty
  // stat_name, an empty value_func or last_k < 1.
  StatMonitorParamSetter(HyperParamRef param, std::string stat_name,
                         std::function<double(double)> value_func, double threshold, int64_t last_k,
                         StatMonitorParamSetterOptions options = {});

  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

 protected:
  std::optional<double> _get_value_to_set() override;

 private:
  std::string stat_name_;
  std::function<double(double)> value_func_;
  double threshold_;
  size_t last_k_;
  StatMonitorParamSetterOptions options_;
  std::deque<std::pair<int64_t, double>> history_;  // (global_step, value), at most last_k
};

}  // namespace trainpack
