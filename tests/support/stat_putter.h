// A callback for tests that puts a statistic to the monitors at chosen epoch ends (for MinSaver,
// MaxSaver and anything else that reads the latest value of a stat).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "trainpack/testing.h"

namespace trainpack {
namespace testing {

// Puts `stat` at the end of the epochs listed, with the value given for the epoch.
inline std::shared_ptr<ActionCallback> stat_putter(const std::string& stat,
                                                   std::map<int64_t, double> values) {
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_fn = [stat, values](ActionCallback& self) {
    auto it = values.find(self.epoch_num());
    if (it != values.end()) self.trainer().monitors().put_scalar(stat, it->second);
  };
  return cb;
}

}  // namespace testing
}  // namespace trainpack
