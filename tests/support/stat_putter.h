// A callback for tests that puts a statistic to the monitors at chosen epoch ends (for MinSaver,
// MaxSaver and anything else that reads the latest value of a stat), as a validation would.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "trainpack/core/monitor_base.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace testing {

// Puts `stat` at the end of the epochs listed, with the value given for the epoch. It declares
// itself a validator (Monitors::add_validator) and reports each put as a validation round, so
// that MinSaver and EarlyStopping check their stat's name only once it has put something.
inline std::shared_ptr<ActionCallback> stat_putter(const std::string& stat,
                                                   std::map<int64_t, double> values) {
  auto cb = std::make_shared<ActionCallback>();
  cb->setup_graph_fn = [](ActionCallback& self) { self.trainer().monitors().add_validator(self); };
  cb->trigger_fn = [stat, values](ActionCallback& self) {
    auto it = values.find(self.epoch_num());
    if (it == values.end()) return;
    self.trainer().monitors().put_scalar(stat, it->second);
    self.trainer().monitors().validation_done(self);
  };
  return cb;
}

}  // namespace testing
}  // namespace trainpack
