#include "trainpack/callbacks/hooks.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <typeinfo>

#include "trainpack/core/trainer.h"
#include "trainpack/detail/override_detection.h"
#include "trainpack/utils/demangle.h"
#include "trainpack/utils/host_read.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/npz.h"
#include "trainpack/utils/output_dir.h"

namespace trainpack {

// ---- StepHook ----

namespace {

// A hook that overrides nothing: the reference for override detection.
class PlainStepHook final : public StepHook {};

const StepHook& plain_step_hook() {
  static const PlainStepHook plain;
  return plain;
}

// True if `hook`'s class overrides `method` beyond `reference`'s.
bool hook_overrides_beyond(const StepHook& hook, const StepHook& reference,
                           StepHook::Method method) {
  using detail::overrides_virtual;
  switch (method) {
    case StepHook::Method::kBegin:
      return overrides_virtual<StepHook>(hook, reference, &StepHook::begin);
    case StepHook::Method::kAfterCreateSession:
      return overrides_virtual<StepHook>(hook, reference, &StepHook::after_create_session);
    case StepHook::Method::kBeforeRun:
      return overrides_virtual<StepHook>(hook, reference, &StepHook::before_run);
    case StepHook::Method::kAfterRun:
      return overrides_virtual<StepHook>(hook, reference, &StepHook::after_run);
    case StepHook::Method::kEnd:
      return overrides_virtual<StepHook>(hook, reference, &StepHook::end);
  }
  return true;
}

}  // namespace

std::string StepHook::name() const { return class_name(typeid(*this)); }

bool StepHook::overrides(Method method) const {
  return hook_overrides_beyond(*this, plain_step_hook(), method);
}

// ---- HookToCallback ----

HookToCallback::HookToCallback(StepHookPtr hook, const char* class_name) : hook_(std::move(hook)) {
  if (!hook_) {
    throw std::invalid_argument(
        fmt::format("{}: hook is null; pass a StepHook (std::make_shared<MyHook>())", class_name));
  }
  set_chief_only(false);
  // tensorpack calls hook.begin() outside the callback's name scope.
  enter_name_scope_ = false;
}

bool HookToCallback::overrides(Hook hook) const {
  // A subclass that overrides a callback hook beyond this adapter adds behaviour of its own.
  class PlainAdapter final : public HookToCallback {
   public:
    PlainAdapter()
        : HookToCallback(StepHookPtr(StepHookPtr(), const_cast<StepHook*>(&plain_step_hook()))) {}
  };
  static const PlainAdapter reference;
  const bool beyond = hook == Hook::kTriggerEpoch
                          ? overrides_beyond(reference, Hook::kTriggerEpoch) ||
                                overrides_beyond(reference, Hook::kTrigger)
                          : overrides_beyond(reference, hook);
  if (beyond) return true;
  switch (hook) {
    case Hook::kSetupGraph:
      return hook_->overrides(StepHook::Method::kBegin);
    case Hook::kBeforeTrain:
      return hook_->overrides(StepHook::Method::kAfterCreateSession);
    case Hook::kBeforeRun:
      return hook_->overrides(StepHook::Method::kBeforeRun);
    case Hook::kAfterRun:
      return hook_->overrides(StepHook::Method::kAfterRun);
    case Hook::kAfterTrain:
      return hook_->overrides(StepHook::Method::kEnd);
    default:
      return false;
  }
}

// ---- CallbackToHook ----

CallbackToHook::CallbackToHook(CallbackPtr callback) : callback_(std::move(callback)) {
  if (!callback_) {
    throw std::invalid_argument(
        "CallbackToHook: callback is null; pass a callback (std::make_shared<MyCallback>())");
  }
}

bool CallbackToHook::overrides(Method method) const {
  class PlainAdapter final : public CallbackToHook {
   public:
    PlainAdapter() : CallbackToHook(detail::unowned_plain_callback()) {}
  };
  static const PlainAdapter reference;
  if (hook_overrides_beyond(*this, reference, method)) return true;
  switch (method) {
    case Method::kBeforeRun:
      return callback_->overrides(Hook::kBeforeRun);
    case Method::kAfterRun:
      return callback_->overrides(Hook::kAfterRun);
    default:
      return false;
  }
}

// ---- has_inf_or_nan ----

bool has_inf_or_nan(const std::string& /*name*/, const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.numel() == 0) return false;
  const at::ScalarType type = tensor.scalar_type();
  if (!at::isFloatingType(type) && !at::isComplexType(type)) return false;
  return !host_scalar<bool>(at::isfinite(tensor.detach()).all());
}

// ---- TensorWatchHook ----

namespace {

constexpr const char* kInfOrNan = "has_inf_or_nan";

// numpy's name of a dtype (float32, int64, ...), else LibTorch's.
std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(type);
  }
}

std::string shape_of(const at::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes().begin(), t.sizes().end(), ", "));
}

// `shape [2, 3], dtype float32, 6 values: 1 NaN, 0 Inf; finite: min -1, max 2, mean 0.5`.
std::string statistics(const at::Tensor& tensor) {
  const at::Tensor t = tensor.detach();
  const at::ScalarType type = t.scalar_type();
  std::string out =
      fmt::format("shape {}, dtype {}, {} values", shape_of(t), dtype_name(type), t.numel());
  if (at::isComplexType(type)) return out;
  at::Tensor finite;
  if (at::isFloatingType(type)) {
    const at::Tensor d = t.to(at::kDouble).flatten();
    const int64_t nans = host_scalar<int64_t>(at::isnan(d).sum());
    const int64_t infs = host_scalar<int64_t>(at::isinf(d).sum());
    out += fmt::format(": {} NaN, {} Inf", nans, infs);
    finite = d.masked_select(at::isfinite(d));
  } else {
    finite = t.to(at::kDouble).flatten();
  }
  if (finite.numel() == 0) return out + "; finite: none";
  return out + fmt::format("; finite: min {:.6g}, max {:.6g}, mean {:.6g}",
                           host_scalar(finite.min()), host_scalar(finite.max()),
                           host_scalar(finite.mean()));
}

// The tensor as an npz array can hold it (bfloat16 as float32), or undefined when no npz dtype
// can (complex, quantized). Still on its device: write_npz copies it to the host.
at::Tensor for_npz(const at::Tensor& tensor) {
  const at::Tensor t = tensor.detach();
  switch (t.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kChar:
    case at::kByte:
    case at::kShort:
    case at::kInt:
    case at::kLong:
    case at::kBool:
      return t;
    case at::kBFloat16:
      return t.to(at::kFloat);
    default:
      return at::Tensor();
  }
}

}  // namespace

TensorWatchHook::TensorWatchHook(TensorWatchHookOptions options) : options_(std::move(options)) {
  std::vector<std::string> seen;
  for (const std::string& name : options_.names()) {
    if (name.empty()) {
      throw std::invalid_argument(
          "TensorWatchHook: TensorWatchHookOptions().names has an empty name; give the names the "
          "step publishes, or no names to watch every one");
    }
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      throw std::invalid_argument(fmt::format(
          "TensorWatchHook: TensorWatchHookOptions().names has '{}' twice; give each name once",
          name));
    }
    seen.push_back(name);
  }
  if (options_.max_dumps() < 1) {
    throw std::invalid_argument(
        fmt::format("TensorWatchHook: TensorWatchHookOptions().max_dumps must be >= 1, got {}",
                    options_.max_dumps()));
  }
  if (options_.dir() && options_.dir()->empty()) {
    throw std::invalid_argument(
        "TensorWatchHook: TensorWatchHookOptions().dir is empty; leave it unset for the logger "
        "directory");
  }
  dir_ = resolve_output_dir(options_.dir(), "TensorWatchHook", "TensorWatchHookOptions().dir(dir)");
  fixed_ = RunArgs(options_.names());
  if (options_.inf_or_nan_filter()) filters_.push_back(Filter{kInfOrNan, has_inf_or_nan});
}

void TensorWatchHook::add_tensor_filter(const std::string& filter_name, TensorFilter filter) {
  if (filter_name.empty()) {
    throw std::invalid_argument("TensorWatchHook::add_tensor_filter: filter_name is empty");
  }
  if (!filter) {
    throw std::invalid_argument(fmt::format(
        "TensorWatchHook::add_tensor_filter: the filter '{}' is an empty function", filter_name));
  }
  for (const Filter& f : filters_) {
    if (f.name == filter_name) {
      throw std::invalid_argument(fmt::format(
          "TensorWatchHook::add_tensor_filter: a filter named '{}' was already added; give each "
          "filter its own name",
          filter_name));
    }
  }
  filters_.push_back(Filter{filter_name, std::move(filter)});
}

void TensorWatchHook::after_create_session(Trainer& /*trainer*/) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    throw std::runtime_error(
        fmt::format("TensorWatchHook: cannot create the directory '{}': {}", dir_, ec.message()));
  }
}

RunArgs TensorWatchHook::before_run(const StepContext& ctx) {
  if (!options_.names().empty()) return RunArgs::ref(fixed_);
  // The position of this run in its step: several hooked runs of one step share local_step.
  const Trainer& t = ctx.trainer();
  if (t.epoch_num() == last_epoch_ && t.local_step() == last_local_step_) {
    ++position_;
  } else {
    position_ = 0;
    last_epoch_ = t.epoch_num();
    last_local_step_ = t.local_step();
  }
  if (position_ < learned_.size()) return RunArgs::ref(learned_[position_]);
  return RunArgs();
}

void TensorWatchHook::learn_names(const StepContext& ctx) {
  std::vector<std::string> names;
  for (const std::string& n : ctx.published_names()) {
    if (std::find(known_.begin(), known_.end(), n) == known_.end()) names.push_back(n);
  }
  known_.insert(known_.end(), names.begin(), names.end());
  TP_LOG_INFO(
      "TensorWatchHook: watching the {} tensor{} published by the step{}: {} (from the next "
      "step on)",
      names.size(), names.size() == 1 ? "" : "s",
      position_ == 0 ? "" : fmt::format(" in its hooked run {}", position_ + 1),
      names.empty() ? "(none)" : fmt::format("{}", fmt::join(names, ", ")));
  learned_.emplace_back(std::move(names));
}

void TensorWatchHook::after_run(const StepContext& ctx, const RunValues& values) {
  if (options_.names().empty() && position_ >= learned_.size()) {
    learn_names(ctx);
    return;
  }
  hits_.clear();
  for (size_t i = 0; i < values.size(); ++i) {
    const at::Tensor& tensor = values[i];
    for (size_t f = 0; f < filters_.size(); ++f) {
      if (filters_[f].fn(values.name(i), tensor)) {
        hits_.emplace_back(i, f);
        break;
      }
    }
  }
  if (hits_.empty()) return;

  Trainer& trainer = ctx.trainer();
  const std::string where =
      fmt::format("at global_step={} (epoch {}, local step {})", trainer.global_step(),
                  trainer.epoch_num(), trainer.local_step());
  for (const auto& [i, f] : hits_) {
    TP_LOG_WARN("TensorWatchHook: tensor '{}' failed {} {}: {}", values.name(i), filters_[f].name,
                where, statistics(values[i]));
  }
  std::string why_not;
  const std::string path = dump(trainer, values, why_not);
  const auto& [first, first_filter] = hits_.front();
  std::string reason = fmt::format("Tensor '{}' failed {} {}", values.name(first),
                                   filters_[first_filter].name, where);
  if (hits_.size() > 1) reason += fmt::format(" (and {} more tensors)", hits_.size() - 1);
  reason += path.empty() ? fmt::format("; the step's tensors were not written: {}", why_not)
                         : fmt::format("; the step's tensors are in {}", path);

  if (options_.action() == DebugAction::kLogAndContinue) return;
  if (options_.action() == DebugAction::kConsoleIfTerminal &&
      options_.terminal().value_or(stdin_is_terminal())) {
    pending_ = true;  // the console opens between steps (act)
    reason_ = std::move(reason);
    return;
  }
  // A stop request, not StopTraining: every callback still runs its after_run and trigger_step
  // of this step, and a data-parallel run stops on every rank at this boundary.
  TP_LOG_ERROR("TensorWatchHook: {}. Stopping training.", reason);
  ctx.request_stop();
}

std::string TensorWatchHook::dump(Trainer& trainer, const RunValues& values, std::string& why_not) {
  if (static_cast<int64_t>(dumps_.size()) >= options_.max_dumps()) {
    why_not = fmt::format("max_dumps ({}) files were written already", options_.max_dumps());
    if (!dumps_exhausted_logged_) {
      TP_LOG_WARN(
          "TensorWatchHook: {} npz files were written (max_dumps); later hits are only "
          "logged",
          options_.max_dumps());
      dumps_exhausted_logged_ = true;
    }
    return "";
  }
  std::vector<std::pair<std::string, at::Tensor>> arrays;
  std::vector<std::string> left_out;
  for (size_t i = 0; i < values.size(); ++i) {
    at::Tensor t = for_npz(values[i]);
    if (t.defined()) {
      arrays.emplace_back(values.name(i), std::move(t));
    } else {
      left_out.push_back(
          fmt::format("'{}' ({})", values.name(i), dtype_name(values[i].scalar_type())));
    }
  }
  if (!left_out.empty()) {
    TP_LOG_WARN("TensorWatchHook: left out of the npz, whose format has no such dtype: {}",
                fmt::join(left_out, ", "));
  }
  const std::string path =
      (std::filesystem::path(dir_) / fmt::format("debug-step-{}.npz", trainer.global_step()))
          .string();
  try {
    write_npz(path, arrays);
  } catch (const std::exception& e) {
    why_not = e.what();
    TP_LOG_ERROR("TensorWatchHook: cannot write {}: {}", path, e.what());
    trainer.report_write_failure(name(), path, e.what());
    return "";
  }
  dumps_.push_back(path);
  return path;
}

void TensorWatchHook::act(Trainer& trainer) {
  if (!pending_) return;
  pending_ = false;
  const std::string reason = std::move(reason_);
  reason_.clear();
  if (run_training_console(trainer, reason + ".", options_.console()) == ConsoleOutcome::kStop) {
    TP_LOG_ERROR("TensorWatchHook: {}. Stopping training (from the console).", reason);
    trainer.request_stop();
  }
}

// ---- LocalDebugHook ----

LocalDebugHook::LocalDebugHook(LocalDebugHookOptions options)
    : HookToCallback(std::make_shared<TensorWatchHook>(std::move(options)), "LocalDebugHook") {
  set_chief_only(true);
}

}  // namespace trainpack
