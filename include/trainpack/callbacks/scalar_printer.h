// ScalarPrinter (tensorpack's ScalarPrinter): logs the scalars put to the monitors. See
// docs/monitors.md, "ScalarPrinter: the console" (and its differences from tensorpack).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/utils/arg.h"

#include "trainpack/core/monitor_base.h"

namespace trainpack {

struct ScalarPrinterOptions {
  // Print after every step (the epoch's last step is left to the epoch print when enable_epoch).
  TORCH_ARG(bool, enable_step) = false;
  // Print at the end of every epoch.
  TORCH_ARG(bool, enable_epoch) = true;
  // Print only names in which one of these regular expressions is found; unset: every name; an
  // empty list (`{}` too): none.
  TRAINPACK_LIST_ARG(std::string, whitelist);
  // Never print names in which one of these regular expressions is found.
  TORCH_ARG(std::vector<std::string>, blacklist);
};

// Logs the scalars put to the monitors as `name: value` INFO lines sorted by name, values in
// Python's `%.5g` (`cost: 0.31416`). Prints in before_train, at every epoch end (enable_epoch),
// after every step (enable_step; an epoch's last step goes with the epoch's print) and in
// after_train (what came after the last print); each print shows the last value of each name put
// since the previous one. A name is printed when a whitelist pattern (no whitelist: any name) and
// no blacklist pattern is found in it (std::regex search, as Python's re.search).
class ScalarPrinter : public MonitorBase {
 public:
  // Throws std::invalid_argument naming the list and the pattern when a pattern is not a valid
  // regular expression.
  explicit ScalarPrinter(ScalarPrinterOptions options = {});

  void process_scalar(const std::string& name, double value) override;
  // The step and epoch hooks only when their flag is on: a printer that prints per epoch is not
  // on the per-step path.
  bool overrides(Hook hook) const override;

 protected:
  void _before_train() override { trigger(); }
  void _trigger_step() override;
  void _trigger_epoch() override;
  // Prints the values put since the last print and forgets them.
  void _trigger() override;
  void _after_train() override { trigger(); }

 private:
  struct Entry {
    double value = 0;
    bool pending = false;        // put since the last print
    bool passes_filter = false;  // passes the whitelist and blacklist (worked out once per name)
  };
  bool selected(const std::string& name) const;

  ScalarPrinterOptions options_;
  std::vector<std::regex> whitelist_;
  std::vector<std::regex> blacklist_;
  // Every name seen, sorted; kept (not pending) so that putting a known name allocates nothing.
  std::map<std::string, Entry, std::less<>> values_;
  // The entry put to last (values_.end(): none); map iterators stay valid as names are added.
  std::map<std::string, Entry, std::less<>>::iterator last_put_ = values_.end();
  std::size_t num_pending_ = 0;
};

}  // namespace trainpack
