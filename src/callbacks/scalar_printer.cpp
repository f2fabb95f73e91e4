#include "trainpack/callbacks/scalar_printer.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "trainpack/core/trainer.h"
#include "trainpack/utils/humanize.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

std::vector<std::regex> compile(const std::vector<std::string>& patterns, const char* list) {
  std::vector<std::regex> out;
  out.reserve(patterns.size());
  for (const std::string& p : patterns) {
    try {
      out.emplace_back(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw std::invalid_argument(
          fmt::format("ScalarPrinter: {} pattern '{}' is not a valid regular expression ({})", list,
                      p, e.what()));
    }
  }
  return out;
}

bool found_in(const std::vector<std::regex>& patterns, const std::string& name) {
  for (const std::regex& re : patterns) {
    if (std::regex_search(name, re)) return true;
  }
  return false;
}

}  // namespace

ScalarPrinter::ScalarPrinter(ScalarPrinterOptions options) : options_(std::move(options)) {
  if (options_.whitelist()) whitelist_ = compile(*options_.whitelist(), "whitelist");
  blacklist_ = compile(options_.blacklist(), "blacklist");
}

bool ScalarPrinter::selected(const std::string& name) const {
  if (options_.whitelist() && !found_in(whitelist_, name)) return false;
  return !found_in(blacklist_, name);
}

void ScalarPrinter::process_scalar(const std::string& name, double value) {
  // The name put last is usually the one put now: one string comparison instead of a map walk.
  auto it = last_put_;
  if (it == values_.end() || it->first != name) {
    it = values_.find(name);
    if (it == values_.end()) {
      Entry entry;
      entry.passes_filter = selected(name);
      it = values_.emplace(name, entry).first;
    }
    last_put_ = it;
  }
  Entry& e = it->second;
  e.value = value;
  if (!e.pending) {
    e.pending = true;
    ++num_pending_;
  }
}

bool ScalarPrinter::overrides(Hook hook) const {
  if (hook == Hook::kTriggerStep && !options_.enable_step()) return false;
  if (hook == Hook::kTriggerEpoch && !options_.enable_epoch()) return false;
  return MonitorBase::overrides(hook);
}

void ScalarPrinter::_trigger_step() {
  if (!options_.enable_step()) return;
  const bool last_step_of_epoch = local_step() == trainer().steps_per_epoch() - 1;
  // The epoch's last step is printed together with the epoch when enable_epoch is on.
  if (!last_step_of_epoch || !options_.enable_epoch()) trigger();
}

void ScalarPrinter::_trigger_epoch() {
  if (options_.enable_epoch()) trigger();
}

void ScalarPrinter::_trigger() {
  if (num_pending_ == 0) return;
  for (auto& [name, e] : values_) {
    if (!e.pending) continue;
    if (e.passes_filter) TP_LOG_INFO("{}: {}", name, format_g(e.value, 5));
    e.pending = false;
  }
  num_pending_ = 0;
}

}  // namespace trainpack
