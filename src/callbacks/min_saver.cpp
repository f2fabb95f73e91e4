// MinSaver, MaxSaver (trainpack/callbacks/min_saver.h): when they copy a checkpoint, and the
// best-value bookkeeping that a resumed run continues.
#include "trainpack/callbacks/min_saver.h"

#include <ATen/ops/scalar_tensor.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "trainpack/callbacks/saver.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/detail/model_savers.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/file_names.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/output_dir.h"

namespace trainpack {

namespace fs = std::filesystem;

namespace {

// The step of a checkpoint named exactly `model-<digits>` (any directory), else nullopt.
std::optional<int64_t> checkpoint_step(const std::string& path) {
  const std::string base = fs::path(path).filename().string();
  const std::string prefix = "model-";
  if (base.size() <= prefix.size() || base.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  const std::string digits = base.substr(prefix.size());
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;  // `model-050` is not step 50
  return std::stoll(digits);
}

// What MinSaver's messages call the best value ("minimum", or "maximum" for MaxSaver).
const char* extreme_word(bool reverse) { return reverse ? "maximum" : "minimum"; }

}  // namespace

MinSaver::MinSaver(std::string monitor_stat, MinSaverOptions options)
    : stat_(std::move(monitor_stat)), options_(std::move(options)) {
  const char* who = options_.reverse() ? "MaxSaver" : "MinSaver";
  if (stat_.empty()) throw std::invalid_argument(fmt::format("{}: monitor_stat is empty", who));
  // File names from user strings follow one rule (utils/file_names.h): an explicit filename must
  // already keep to it, the stat name is made to.
  if (options_.filename()) {
    const std::string& f = *options_.filename();
    if (const auto problem = file_name_problem(f)) {
      throw std::invalid_argument(fmt::format(
          "{}: filename '{}' is not a plain file name (the directory is checkpoint_dir): {}; "
          "for example '{}'",
          who, f, *problem, safe_file_name_component(f)));
    }
    filename_ = f;
  } else {
    filename_ =
        fmt::format("{}-{}", options_.reverse() ? "max" : "min", safe_file_name_component(stat_));
  }
  dir_ = detail::saver_dir(options_.checkpoint_dir());
}

std::string MinSaver::best_checkpoint_prefix() const { return detail::saver_path(dir_, filename_); }

void MinSaver::_setup_graph() {
  if (dir_.empty()) {
    throw std::invalid_argument(missing_output_dir_message(
        name(), options_.reverse() ? "MaxSaverOptions().checkpoint_dir(dir)"
                                   : "MinSaverOptions().checkpoint_dir(dir)"));
  }
  check_after_model_saver();
  last_trigger_step_.reset();
}

namespace {

// Whether `cb` is `target` or wraps it (through ProxyCallbacks).
bool is_or_wraps(const CallbackPtr& cb, const Callback* target) {
  if (cb.get() == target) return true;
  const auto* proxy = dynamic_cast<const ProxyCallback*>(cb.get());
  return proxy != nullptr && is_or_wraps(proxy->inner(), target);
}

// Whether `cb` is or wraps a ModelSaver writing to `dir`.
bool holds_model_saver_of(const CallbackPtr& cb, const std::string& dir) {
  std::vector<ModelSaver*> savers;
  detail::collect_model_savers(cb, &savers);
  return std::any_of(savers.begin(), savers.end(),
                     [&](const ModelSaver* s) { return s->checkpoint_dir() == dir; });
}

}  // namespace

void MinSaver::check_after_model_saver() const {
  // The callbacks as the trainer calls them; `own` is the entry that is (or wraps) this MinSaver.
  const std::vector<CallbackPtr>& callbacks = trainer().registered_callbacks();
  std::optional<size_t> own, first_saver;
  for (size_t i = 0; i < callbacks.size(); ++i) {
    if (!own && is_or_wraps(callbacks[i], this)) own = i;
    if (!first_saver && holds_model_saver_of(callbacks[i], dir_)) first_saver = i;
  }
  // No ModelSaver of this directory at all is left to the trigger (tensorpack's error there).
  if (!own || !first_saver || *first_saver < *own) return;
  const std::string me = callbacks[*own]->name(), saver = callbacks[*first_saver]->name();
  throw std::invalid_argument(fmt::format(
      "{} comes before {} in the callbacks, but it copies the checkpoint that {} saves at the "
      "same epoch end: put {} after {}, e.g. {{InferenceRunner, ModelSaver, {}}}",
      me, saver, saver, me, saver, name()));
}

bool MinSaver::is_better(double value) const {
  if (std::isnan(value)) return false;
  // A best whose copy is owed counts: a worse value does not replace it.
  const auto& best = unsaved_ ? unsaved_ : best_;
  if (!best) return true;
  return options_.reverse() ? value > best->second : value < best->second;
}

void MinSaver::_before_train() {
  // A copy the previous run owed (see the header): made before training goes on.
  if (!unsaved_) return;
  const std::string original = detail::saver_path(dir_, fmt::format("model-{}", unsaved_->first));
  if (!checkpoint_fingerprint(original)) {
    TP_LOG_WARN(
        "[{}] The checkpoint records a new {} '{}'={:.5g} at global_step={} whose copy was not "
        "made, but {}.data is missing or damaged: the copy cannot be made; {} keeps {}.",
        name(), extreme_word(options_.reverse()), stat_, unsaved_->second, unsaved_->first,
        original, best_checkpoint_prefix() + ".data",
        best_ ? fmt::format("global_step={}", best_->first) : std::string("what it holds"));
    unsaved_.reset();
    return;
  }
  TP_LOG_INFO(
      "[{}] The previous run found a new {} '{}' at global_step={} but did not copy its "
      "checkpoint; copying it now.",
      name(), extreme_word(options_.reverse()), stat_, unsaved_->first);
  retry_unsaved();
}

bool MinSaver::retry_unsaved() {
  if (!unsaved_) return false;
  const auto [step, value] = *unsaved_;
  if (!copy_from(step, value)) return false;
  best_ = unsaved_;
  unsaved_.reset();
  return true;
}

void MinSaver::_trigger() {
  last_trigger_step_ = global_step();
  const Monitors::History& history = trainer().monitors().get_history(stat_);
  if (history.empty()) {
    found_no_value_ = true;
    check_missing_stat();
  }
  const bool has_new = !history.empty() && is_better(history.back().second);
  if (!has_new) {
    retry_unsaved();  // a copy that failed before, while it is still the best
    return;
  }
  const auto [step, value] = history.back();
  if (save(step, value)) {
    best_ = std::make_pair(step, value);
    unsaved_.reset();
  }
}

namespace {

// "a, b, c", or "none" for a run that put no stat yet.
std::string stat_names(const Monitors& monitors) {
  const std::vector<std::string> names = monitors.names();
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

void MinSaver::check_missing_stat() {
  if (warned_missing_) return;
  const std::optional<std::string> problem =
      detail::missing_stat_problem(trainer().monitors(), stat_, global_step(), epoch_num());
  if (!problem) return;  // it has a value, or its validation has not run yet
  if (options_.strict()) {
    failed_missing_ = true;  // the error says it all: no warning at after_train
    throw std::runtime_error(fmt::format(
        "{}: {} Check the name, and that the callback that puts it comes before {} in the "
        "callbacks; or, for a stat that comes later, pass {}().strict(false) to warn instead",
        name(), *problem, name(), options_.reverse() ? "MaxSaverOptions" : "MinSaverOptions"));
  }
  warned_missing_ = true;
  TP_LOG_WARN(
      "[{}] {} Check the name, and that the callback that puts it comes before {} in the "
      "callbacks. Training goes on (strict(false)).",
      name(), *problem, name());
}

void MinSaver::_after_train() {
  // Only after a trigger found no value: a run stopped before its first trigger says nothing.
  if (!found_no_value_ || failed_missing_ || !trainer().monitors().get_history(stat_).empty()) {
    return;
  }
  TP_LOG_WARN(
      "[{}] '{}' was never put during training: {} was not written. The stats that were "
      "put: {}.",
      name(), stat_, best_checkpoint_prefix() + ".data", stat_names(trainer().monitors()));
}

bool MinSaver::save(int64_t step, double value) {
  const char* extreme = extreme_word(options_.reverse());
  // ModelSaver, triggered before this at the same step, may still be writing the checkpoint of
  // `step`: wait for it (and have its failure reported, which failed_save looks for).
  wait_for_model_savers(trainer());
  std::optional<CheckpointIndex> index;
  try {
    index = read_checkpoint_index(dir_);
  } catch (const std::exception& e) {
    TP_LOG_ERROR("[{}] Cannot read the checkpoint index: {}", name(), e.what());
    return false;
  }
  const std::string path =
      index ? detail::saver_path(dir_, index->model_checkpoint_path) : std::string();
  if (!index || checkpoint_step(path) != step) {
    if (const std::optional<std::string> failure = failed_save(step)) {
      // ModelSaver did run at this step but could not save: that is the reason, not the order of
      // the callbacks. The copy is promised too, so it is reported as well.
      const std::string copy = best_checkpoint_prefix() + ".data";
      TP_LOG_ERROR(
          "[{}] New {} '{}'={:.5g} found at global_step={}, but its checkpoint could not be saved "
          "({}), so it was not copied to {}.",
          name(), extreme, stat_, value, step, *failure, copy);
      trainer().report_write_failure(
          name(), copy,
          fmt::format("the checkpoint of global_step={} with the new {} '{}' could not be saved",
                      step, extreme, stat_));
      return false;
    }
  }
  if (!index) {
    // tensorpack's messages say "MinSaver" for MaxSaver too (it is a MinSaver with reverse).
    throw std::runtime_error(
        "[MinSaver] Cannot find a checkpoint state. Do you forget to use ModelSaver?");
  }
  if (checkpoint_step(path) != step) {
    TP_LOG_WARN("[MinSaver] New {} '{}' found at global_step={}, but the latest checkpoint is {}.",
                extreme, stat_, step, path);
    TP_LOG_WARN(
        "MinSaver will do nothing this time. The callbacks may have inconsistent frequency or "
        "wrong order.");
    return false;
  }
  if (copy_from(step, value)) return true;
  // The checkpoint is there: the copy is owed, and retried (see the header).
  unsaved_ = std::make_pair(step, value);
  return false;
}

bool MinSaver::copy_from(int64_t step, double value) {
  const std::string path = detail::saver_path(dir_, fmt::format("model-{}", step));
  try {
    copy_checkpoint(path, best_checkpoint_prefix(),
                    CheckpointWriteOptions().fsync(options_.fsync()));
  } catch (const std::exception& e) {
    TP_LOG_ERROR("[{}] Cannot copy {} to {}: {}", name(), path, best_checkpoint_prefix(), e.what());
    trainer().report_write_failure(name(), best_checkpoint_prefix() + ".data", e.what());
    return false;
  }
  TP_LOG_INFO("Model at global_step={} with {} {}={:.5g} saved.", step,
              extreme_word(options_.reverse()), stat_, value);
  return true;
}

std::optional<std::string> MinSaver::failed_save(int64_t step) const {
  // A failure of this step whose file is this directory's checkpoint of `step` or its index.
  const std::string data = detail::saver_path(dir_, fmt::format("model-{}.data", step));
  const std::string index = detail::saver_path(dir_, "checkpoint");
  const auto& failures = trainer().write_failures();
  for (auto it = failures.rbegin(); it != failures.rend(); ++it) {
    if (it->global_step == step && (it->path == data || it->path == index)) return it->error;
  }
  return std::nullopt;
}

CallbackState MinSaver::state() const {
  CallbackState s;
  if (best_) {
    s["best_step"] = at::scalar_tensor(best_->first, at::kLong);
    s["best_value"] = at::scalar_tensor(best_->second, at::kDouble);
  }
  if (is_set_up()) {
    // The value this trigger is about to consider at this step (see the header).
    const int64_t gs = global_step();
    const Monitors::History& history = trainer().monitors().get_history(stat_);
    if (!history.empty() && history.back().first == gs && last_trigger_step_ != gs &&
        is_better(history.back().second)) {
      s["pending_step"] = at::scalar_tensor(gs, at::kLong);
      s["pending_value"] = at::scalar_tensor(history.back().second, at::kDouble);
      return s;
    }
  }
  if (unsaved_) {  // a copy owed from an earlier step
    s["pending_step"] = at::scalar_tensor(unsaved_->first, at::kLong);
    s["pending_value"] = at::scalar_tensor(unsaved_->second, at::kDouble);
  }
  return s;
}

namespace {

// The (step, value) pair stored under `<what>_step` / `<what>_value`, or nullopt when neither is.
std::optional<std::pair<int64_t, double>> state_pair(const std::string& who,
                                                     const CallbackState& state,
                                                     const std::string& what) {
  const std::string step_key = what + "_step", value_key = what + "_value";
  const bool has_step = state.count(step_key) != 0, has_value = state.count(value_key) != 0;
  if (!has_step && !has_value) return std::nullopt;
  if (!has_step || !has_value) {
    throw std::invalid_argument(
        fmt::format("{}: state entry '{}' is missing", who, has_step ? value_key : step_key));
  }
  // Checkpoint contents, on the CPU: no device value, read directly.
  return std::make_pair(state.at(step_key).item<int64_t>(), state.at(value_key).item<double>());
}

}  // namespace

void MinSaver::load_state(const CallbackState& state) {
  for (const auto& [key, tensor] : state) {
    if (key != "best_step" && key != "best_value" && key != "pending_step" &&
        key != "pending_value") {
      throw std::invalid_argument(fmt::format("{}: unknown state entry '{}'", name(), key));
    }
    if (!tensor.defined() || tensor.numel() != 1) {
      throw std::invalid_argument(
          fmt::format("{}: state entry '{}' should hold one number", name(), key));
    }
  }
  best_ = state_pair(name(), state, "best");
  unsaved_.reset();
  const auto pending = state_pair(name(), state, "pending");
  if (pending) {
    // Taken as the best if the copy of that step's checkpoint was made; otherwise the copy is
    // owed, and before_train makes it.
    const auto copy = checkpoint_fingerprint(best_checkpoint_prefix());
    const auto original =
        checkpoint_fingerprint(detail::saver_path(dir_, fmt::format("model-{}", pending->first)));
    if (copy && original && *copy == *original) {
      best_ = pending;
    } else {
      unsaved_ = pending;
    }
  }
  last_trigger_step_.reset();
}

MaxSaver::MaxSaver(std::string monitor_stat, MaxSaverOptions options)
    : MinSaver(std::move(monitor_stat), MinSaverOptions()
                                            .reverse(true)
                                            .filename(options.filename())
                                            .checkpoint_dir(options.checkpoint_dir())
                                            .fsync(options.fsync())
                                            .strict(options.strict())) {}

}  // namespace trainpack
