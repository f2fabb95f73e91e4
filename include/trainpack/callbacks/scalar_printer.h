// ScalarPrinter: logs the scalars put to the monitors, as `name: value` INFO lines sorted by
// name, values in Python's `%.5g` (`cost: 0.31416`, `lr: 1e-05`).
//
// When: in before_train (what earlier callbacks put there), at the end of every epoch
// (enable_epoch, the default), after every step (enable_step; the last step of an epoch is
// printed with the epoch when both are on), and in after_train (whatever arrived after the last
// print). Each print shows the last value put under each name since the previous print, then
// forgets them all. whitelist/blacklist are regular expressions that select names by search (a
// match anywhere in the name, Python's re.search); a name is printed when it matches some
// whitelist pattern (no whitelist: every name) and no blacklist pattern.
//
//   monitors.push_back(std::make_shared<ScalarPrinter>(
//       ScalarPrinterOptions().enable_step(true).blacklist({"^QueueInput/"})));
//
// Differences from tensorpack:
// - docs/tensorpack-differences.md #9, fixed: values put after the last print (e.g. at the last
//   epoch's end with enable_step=true, enable_epoch=false, or at all with both flags false) are
//   printed in after_train instead of being dropped.
// - Patterns use ECMAScript syntax (std::regex), which agrees with Python's `re` on the usual
//   constructs; a pattern that does not compile is an error at construction.
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
  // Every name seen, sorted; entries are kept (and marked not pending) so that putting a known
  // name allocates nothing.
  std::map<std::string, Entry, std::less<>> values_;
  // The entry put to last (values_.end(): none); map iterators stay valid as names are added.
  std::map<std::string, Entry, std::less<>>::iterator last_put_ = values_.end();
  std::size_t num_pending_ = 0;
};

}  // namespace trainpack
