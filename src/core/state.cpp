// The training state as checkpoint entries (trainpack/core/state.h). Each part of the state
// (module tensors, optimizers, Graph variables, RNG, callbacks, counters) has its collect and its
// restore side by side below, as the optimizer codec (optimizer_state.cpp) has; the input's
// position is a callback's state (the input source's callback) and goes with the callbacks.
// collect_training_state and restore_training_state at the end only call the parts in order.
#include "trainpack/core/state.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "trainpack/core/graph.h"
#include "trainpack/core/optimizer_state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/detail/torch_compat.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/terminal_text.h"

namespace trainpack {
namespace {

constexpr const char* kOptimizerPrefix = "optimizer";
constexpr const char* kVariablePrefix = "variable/";
constexpr const char* kCallbackPrefix = "callback/";
constexpr const char* kGlobalStep = "trainer/global_step";
constexpr const char* kEpoch = "trainer/epoch";
// The epoch length of the run that saved the checkpoint (absent before the loop starts, and in
// checkpoints of older versions).
constexpr const char* kStepsPerEpoch = "trainer/steps_per_epoch";
constexpr const char* kStepInEpoch = "trainer/step_in_epoch";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// The names a checkpoint holds come from a file: escaped, so that none writes to the terminal.
std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    out += (out.empty() ? "" : ", ") + terminal_safe(n, LineFeeds::kEscape);
  }
  return out;
}

// One restore in progress: the map, the options and the report, and which entries of the map
// the trainer has a place for. Every part reads the map through it.
class Reader {
 public:
  Reader(const TensorMap& state, const RestoreOptions& options, RestoreReport* report)
      : state_(state), options_(options), report_(*report) {}

  const TensorMap& state() const { return state_; }
  const std::string& source() const { return options_.source(); }
  const RestoreOptions& options() const { return options_; }
  RestoreReport& report() { return report_; }
  bool has(const std::string& entry) const { return state_.count(entry) != 0; }

  // True when RestoreOptions::ignore names `entry` (exactly, or a prefix of it ending in '/').
  bool ignored(const std::string& entry) const {
    for (const auto& pattern : options_.ignore()) {
      if (entry == pattern) return true;
      if (!pattern.empty() && pattern.back() == '/' && starts_with(entry, pattern)) return true;
    }
    return false;
  }

  // The trainer has a place for `entry` (it is not reported as unused).
  void use(const std::string& entry) { used_.insert(entry); }

  // Records `entry` as present but ignored, with tensorpack's message.
  void ignore(const std::string& entry) {
    report_.ignored.push_back(entry);
    TP_LOG_INFO("Variable {} in the graph will not be loaded from {}!",
                terminal_safe(entry, LineFeeds::kEscape), source());
  }

  // The value of `entry` to restore: nullptr when the map lacks it or it is ignored.
  const at::Tensor* take(const std::string& entry) {
    auto it = state_.find(entry);
    if (it == state_.end()) return nullptr;
    use(entry);
    if (ignored(entry)) {
      ignore(entry);
      return nullptr;
    }
    return &it->second;
  }

  // take() for a model entry: one the map lacks is reported as missing.
  const at::Tensor* take_model(const std::string& entry) {
    const at::Tensor* value = take(entry);
    if (value == nullptr && !has(entry)) report_.missing.push_back(entry);
    return value;
  }

  // take() for a training-only entry: one the map lacks is reported as such.
  const at::Tensor* take_training_only(const std::string& entry) {
    const at::Tensor* value = take(entry);
    if (value == nullptr && !has(entry)) report_.missing_training_only.push_back(entry);
    return value;
  }

  // After every part: the entries no part had a place for, and the log lines.
  void finish() {
    for (const auto& kv : state_) {
      if (used_.count(kv.first)) continue;
      // An entry the trainer has no place for, but that the user asked to ignore, is ignored,
      // not reported as unused.
      if (ignored(kv.first)) {
        report_.ignored.push_back(kv.first);
      } else {
        report_.unused.push_back(kv.first);
      }
    }
    if (!report_.missing.empty()) {
      TP_LOG_WARN("The following variables are in the graph, but not found in {}: {}", source(),
                  join_names(report_.missing));
    }
    if (!report_.unused.empty()) {
      TP_LOG_WARN("The following variables are in {}, but not found in the graph: {}", source(),
                  join_names(report_.unused));
    }
    if (!report_.missing_training_only.empty()) {
      TP_LOG_INFO("Training-only state not found in {}, kept as it is: {}", source(),
                  join_names(report_.missing_training_only));
    }
  }

 private:
  const TensorMap& state_;
  const RestoreOptions& options_;
  RestoreReport& report_;
  std::set<std::string> used_;
};

// ---- Module parameters and buffers: <module>/<name>, or <name> for the module "" ----

std::string module_entry(const std::string& module_name, const std::string& tensor_name) {
  return module_name.empty() ? tensor_name : module_name + "/" + tensor_name;
}

// Every module tensor (parameters, then buffers) under its checkpoint entry name.
std::vector<std::pair<std::string, at::Tensor>> module_tensors(const Trainer& trainer) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, module] : trainer.graph().modules()) {
    for (const auto& p : module->named_parameters(/*recurse=*/true)) {
      out.emplace_back(module_entry(name, p.key()), p.value());
    }
    for (const auto& b : module->named_buffers(/*recurse=*/true)) {
      out.emplace_back(module_entry(name, b.key()), b.value());
    }
  }
  return out;
}

void collect_modules(const Trainer& trainer, TensorMap* state) {
  for (auto& [entry, tensor] : module_tensors(trainer)) {
    if (!state->emplace(entry, checkpoint_form(tensor)).second) {
      throw std::logic_error(
          fmt::format("collect_training_state: two module tensors are named '{}'", entry));
    }
  }
}

// The parameter entries among module_tensors (the buffers are not counted in the share below).
std::set<std::string> parameter_entries(const Trainer& trainer) {
  std::set<std::string> out;
  for (const auto& [name, module] : trainer.graph().modules()) {
    for (const auto& p : module->named_parameters(/*recurse=*/true)) {
      out.insert(module_entry(name, p.key()));
    }
  }
  return out;
}

// At most `n` of `names`, then "(and k more)".
std::string sample_names(const std::vector<std::string>& names, size_t n = 8) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < n; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > n) out += fmt::format(" (and {} more)", names.size() - n);
  return out;
}

// The restore of the module tensors: prepare() checks every one (shape, dtype) without changing
// anything; apply() copies them in place, on their devices.
//
// A map that matches fewer than half of the model's parameter tensors (those not ignored; a
// tensor of another shape or dtype does not match) is refused, unless RestoreOptions::partial:
// it is another model's, and "restoring" it would train from random weights while its counters
// and everything else are applied. With partial, mismatched tensors are skipped with a warning.
class ModulesRestore {
 public:
  static ModulesRestore prepare(const Trainer& trainer, Reader* in) {
    ModulesRestore out;
    const std::set<std::string> params = parameter_entries(trainer);
    size_t considered = 0, matched = 0;
    std::vector<std::string> unmatched;   // parameters not restored (missing or mismatched)
    std::vector<std::string> mismatches;  // the message of each mismatched tensor
    for (const auto& [entry, tensor] : module_tensors(trainer)) {
      const bool param = params.count(entry) != 0;
      const bool counted = param && !in->ignored(entry);
      if (counted) ++considered;
      const at::Tensor* value = in->take_model(entry);
      if (value == nullptr) {
        if (counted) unmatched.push_back(entry);
        continue;
      }
      std::string mismatch;
      if (value->sizes() != tensor.sizes()) {
        mismatch = fmt::format("'{}' has shape [{}] there, but [{}] in the model", entry,
                               fmt::join(value->sizes(), ", "), fmt::join(tensor.sizes(), ", "));
      } else if (value->scalar_type() != tensor.scalar_type()) {
        mismatch =
            fmt::format("'{}' is {} there, but {} in the model", entry,
                        c10::toString(value->scalar_type()), c10::toString(tensor.scalar_type()));
      }
      if (!mismatch.empty()) {
        if (counted) unmatched.push_back(entry);
        mismatches.push_back(std::move(mismatch));
        in->report().mismatched.push_back(entry);
        continue;
      }
      if (counted) ++matched;
      out.copies_.emplace_back(tensor, value);
      in->report().restored.push_back(entry);
    }
    const bool too_few = considered > 0 && 2 * matched < considered;
    if (in->options().partial()) {
      for (const auto& m : mismatches) {
        TP_LOG_WARN("Restoring from {}: {}; it will not be loaded (partial restore).", in->source(),
                    m);
      }
      if (too_few) {
        TP_LOG_WARN("Partial restore from {}: {} of the model's {} parameter tensors matched.",
                    in->source(), matched, considered);
      }
    } else if (too_few) {
      throw std::invalid_argument(fmt::format(
          "restoring from {}: it matches {} of the model's {} parameter tensors (at least half "
          "must match); not matched: {}{}. It is probably the checkpoint of another model, and "
          "nothing was restored. To load only the tensors that match (e.g. pretrained layers), "
          "ask for a partial restore: SaverRestoreOptions().partial(true).",
          in->source(), matched, considered, sample_names(unmatched),
          mismatches.empty()
              ? ""
              : fmt::format("; of another shape or dtype: {}", sample_names(mismatches, 3))));
    } else if (!mismatches.empty()) {
      throw std::invalid_argument(
          fmt::format("restoring from {}: {}", in->source(), mismatches.front()));
    } else if (in->options().require_all() && !unmatched.empty()) {
      throw std::invalid_argument(fmt::format(
          "restoring from {}: it lacks {} of the model's {} parameter tensors: {}. Resumed, they "
          "would train on from fresh random weights; nothing was restored. If the model gained "
          "these layers on purpose, allow it (AutoResumeOptions().allow_missing_parameters(true); "
          "the main job's --allow-missing-parameters), or start over.",
          in->source(), unmatched.size(), considered, sample_names(unmatched)));
    }
    return out;
  }

  void apply() {
    torch::NoGradGuard no_grad;
    for (auto& [tensor, value] : copies_) tensor.copy_(*value);
  }

 private:
  std::vector<std::pair<at::Tensor, const at::Tensor*>> copies_;
};

// ---- Optimizers: optimizer[/<name>]/... (core/optimizer_state.h) ----

std::string optimizer_entry(const std::string& name) {
  return name.empty() ? kOptimizerPrefix : std::string(kOptimizerPrefix) + "/" + name;
}

void collect_optimizers(const Trainer& trainer, TensorMap* state) {
  for (const auto& [name, optimizer] : trainer.graph().optimizers()) {
    collect_optimizer_state(*optimizer, optimizer_entry(name), state);
  }
}

// The entries of the map that belong to the optimizer under `entry`: `entry` itself and those
// under `entry/`, less those of another optimizer whose entry is longer (the unnamed optimizer's
// "optimizer/" also prefixes a named one's "optimizer/gen/...").
std::vector<std::string> optimizer_entries(
    const TensorMap& state, const std::string& entry,
    const std::vector<std::pair<std::string, torch::optim::Optimizer*>>& optimizers) {
  std::vector<std::string> others;
  for (const auto& kv : optimizers) {
    const std::string other = optimizer_entry(kv.first);
    if (other.size() > entry.size()) others.push_back(other);
  }
  std::vector<std::string> out;
  if (state.count(entry)) out.push_back(entry);
  const std::string prefix = entry + "/";
  for (auto it = state.lower_bound(prefix); it != state.end() && starts_with(it->first, prefix);
       ++it) {
    const bool other = std::any_of(others.begin(), others.end(), [&](const std::string& o) {
      return it->first == o || starts_with(it->first, o + "/");
    });
    if (!other) out.push_back(it->first);
  }
  return out;
}

// The restore of every optimizer: prepare() reads and checks every entry
// (OptimizerRestore::prepare) without changing anything. An optimizer's entries are restored all
// together or not at all: when any of them is ignored, all are.
class OptimizersRestore {
 public:
  static OptimizersRestore prepare(const Trainer& trainer, Reader* in) {
    OptimizersRestore out;
    const auto& optimizers = trainer.graph().optimizers();
    for (const auto& [name, optimizer] : optimizers) {
      const std::string entry = optimizer_entry(name);
      const std::vector<std::string> own = optimizer_entries(in->state(), entry, optimizers);
      if (std::any_of(own.begin(), own.end(), [&](const auto& e) { return in->ignored(e); })) {
        for (const auto& e : own) {
          in->use(e);
          in->ignore(e);
        }
        continue;
      }
      auto restore = OptimizerRestore::prepare(*optimizer, entry, in->state(), in->source());
      if (!restore) {
        in->report().missing_training_only.push_back(
            has_typed_optimizer_state(*optimizer) ? entry + "/*" : entry);
        continue;
      }
      for (const auto& e : restore->entries()) {
        in->use(e);
        in->report().restored.push_back(e);
      }
      out.restores_.push_back(std::move(*restore));
    }
    return out;
  }

  // Archives first, and before any other part changes the trainer: Optimizer::load is the one
  // step that may still refuse (then nothing else has changed, unless an earlier archive was
  // loaded).
  void apply_archives() {
    for (auto& restore : restores_) {
      if (restore.from_archive()) restore.apply();
    }
  }
  void apply_typed() {
    for (auto& restore : restores_) {
      if (!restore.from_archive()) restore.apply();
    }
  }

 private:
  std::vector<OptimizerRestore> restores_;
};

// ---- Graph variables: variable/<name>, every one but global_step (a counter) ----

void collect_variables(const Trainer& trainer, TensorMap* state) {
  const Graph& graph = trainer.graph();
  for (const auto& name : graph.variable_names()) {
    if (name == "global_step") continue;  // trainer/global_step
    const Graph::Variable& v = graph.variable(name);
    (*state)[kVariablePrefix + name] =
        v.is_floating ? at::scalar_tensor(v.get(), at::kDouble)
                      : at::scalar_tensor(static_cast<int64_t>(v.get()), at::kLong);
  }
}

void restore_variables(Trainer& trainer, Reader* in) {
  Graph& graph = trainer.graph();
  for (const auto& name : graph.variable_names()) {
    if (name == "global_step") continue;
    const std::string entry = kVariablePrefix + name;
    const at::Tensor* value = in->take_model(entry);
    if (value == nullptr) continue;
    graph.variable(name).set(value->item<double>());
    in->report().restored.push_back(entry);
  }
}

// ---- Random number generators: rng/cpu, rng/cuda:<i> ----

std::vector<std::pair<std::string, at::Generator>> generators() {
  std::vector<std::pair<std::string, at::Generator>> out;
  out.emplace_back("rng/cpu", at::detail::getDefaultCPUGenerator());
  if (at::globalContext().hasCUDA()) {
    const auto& hooks = at::detail::getCUDAHooks();
    for (int i = 0; i < hooks.getNumGPUs(); ++i) {
      out.emplace_back(fmt::format("rng/cuda:{}", i),
                       compat::default_cuda_generator(static_cast<c10::DeviceIndex>(i)));
    }
  }
  return out;
}

void collect_rng(TensorMap* state) {
  for (auto& [entry, gen] : generators()) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    (*state)[entry] = gen.get_state();
  }
}

void restore_rng(Reader* in) {
  for (auto& [entry, gen] : generators()) {
    const at::Tensor* value = in->take_training_only(entry);
    if (value == nullptr) continue;
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(*value);
    in->report().restored.push_back(entry);
  }
}

// ---- Callback states: callback/<key>/<entry> (the input's position among them) ----

// The callbacks with their checkpoint keys: state_key(), then key#2, key#3 for repeats.
std::vector<std::pair<std::string, Callback*>> keyed_callbacks(const Trainer& trainer) {
  std::vector<std::pair<std::string, Callback*>> out;
  std::map<std::string, int> seen;
  for (const auto& cb : trainer.registered_callbacks()) {
    const std::string name = cb->state_key();
    const int n = ++seen[name];
    out.emplace_back(n == 1 ? name : fmt::format("{}#{}", name, n), cb.get());
  }
  return out;
}

void collect_callbacks(const Trainer& trainer, TensorMap* state) {
  for (const auto& [key, cb] : keyed_callbacks(trainer)) {
    for (auto& [name, tensor] : cb->state()) {
      (*state)[kCallbackPrefix + key + "/" + name] = checkpoint_form(tensor);
    }
  }
}

// The entries under each callback's key. Names may hold '/' (e.g. "QueueInput" and
// "QueueInput/queue_size"), so an entry belongs to the callback with the longest key that
// prefixes it, never to a shorter key that happens to prefix it too.
void restore_callbacks(const Trainer& trainer, Reader* in) {
  const auto keyed = keyed_callbacks(trainer);
  std::vector<CallbackState> states(keyed.size());
  const TensorMap& state = in->state();
  for (auto it = state.lower_bound(kCallbackPrefix);
       it != state.end() && starts_with(it->first, kCallbackPrefix); ++it) {
    size_t owner = keyed.size();
    size_t owner_key_length = 0;
    for (size_t i = 0; i < keyed.size(); ++i) {
      const std::string prefix = kCallbackPrefix + keyed[i].first + "/";
      if (starts_with(it->first, prefix) && prefix.size() > owner_key_length) {
        owner = i;
        owner_key_length = prefix.size();
      }
    }
    if (owner == keyed.size()) continue;  // no such callback: reported as unused
    if (const at::Tensor* value = in->take(it->first)) {
      states[owner][it->first.substr(owner_key_length)] = *value;
    }
  }
  for (size_t i = 0; i < keyed.size(); ++i) {
    const std::string prefix = kCallbackPrefix + keyed[i].first + "/";
    Callback* cb = keyed[i].second;
    if (states[i].empty()) {
      if (!cb->state().empty()) in->report().missing_training_only.push_back(prefix + "*");
      continue;
    }
    cb->load_state(states[i]);
    for (const auto& kv : states[i]) in->report().restored.push_back(prefix + kv.first);
  }
}

// ---- Counters: trainer/global_step, trainer/epoch, trainer/step_in_epoch ----

void collect_counters(const Trainer& trainer, TensorMap* state) {
  const ResumePoint point = trainer.resume_point();
  (*state)[kGlobalStep] = at::scalar_tensor(point.global_step, at::kLong);
  (*state)[kEpoch] = at::scalar_tensor(point.epoch, at::kLong);
  (*state)[kStepInEpoch] = at::scalar_tensor(point.step_in_epoch, at::kLong);
  if (trainer.steps_per_epoch() > 0) {
    (*state)[kStepsPerEpoch] = at::scalar_tensor(trainer.steps_per_epoch(), at::kLong);
  }
}

// The largest counter value accepted from a checkpoint: 2^53, the largest integer that
// stats.json (a JSON number, a double) holds exactly. Far beyond any real run; a forged
// INT64_MAX would overflow at the next step.
constexpr int64_t kMaxCounter = int64_t{1} << 53;

int64_t scalar_int(const TensorMap& state, const char* key, const std::string& source,
                   int64_t min) {
  const at::Tensor& t = state.at(key);
  if (t.numel() != 1) {
    throw std::invalid_argument(fmt::format("{}: '{}' should hold one number, but has shape {}",
                                            source, key, fmt::join(t.sizes(), "x")));
  }
  if (!c10::isIntegralType(t.scalar_type(), /*includeBool=*/false)) {
    throw std::invalid_argument(fmt::format("{}: '{}' should be an integer, but is {}", source, key,
                                            c10::toString(t.scalar_type())));
  }
  const int64_t value = t.item<int64_t>();
  if (value < min || value > kMaxCounter) {
    throw std::invalid_argument(fmt::format(
        "{}: '{}' is {}, outside the range of that counter [{}, 2^53]; the file is damaged or "
        "was not written by trainpack. Resume from another checkpoint, or load only its weights "
        "(SaverRestoreOptions().restore_counters(false))",
        source, key, value, min));
  }
  return value;
}

// Where to continue: restored as a whole (with restore_counters, and unless trainer/global_step
// is ignored), or not at all.
void restore_counters(Trainer& trainer, Reader* in) {
  const char* const entries[] = {kGlobalStep, kEpoch, kStepInEpoch};
  bool has_counters = true;
  for (const char* entry : entries) {
    if (in->has(entry)) {
      in->use(entry);
    } else {
      has_counters = false;
    }
  }
  const bool has_epoch_length = in->has(kStepsPerEpoch);
  if (has_epoch_length) in->use(kStepsPerEpoch);
  if (has_counters && in->options().restore_counters() && !in->ignored(kGlobalStep)) {
    const int64_t steps_per_epoch =
        has_epoch_length ? scalar_int(in->state(), kStepsPerEpoch, in->source(), 0) : 0;
    trainer.set_resume_point(*saved_resume_point(in->state(), in->source()), steps_per_epoch);
    for (const char* entry : entries) in->report().restored.push_back(entry);
    if (has_epoch_length) in->report().restored.push_back(kStepsPerEpoch);
  } else if (!has_counters) {
    in->report().missing_training_only.push_back("trainer/*");
  }
}

}  // namespace

TensorMap collect_training_state(const Trainer& trainer) {
  TensorMap state;
  collect_modules(trainer, &state);  // first: it refuses entries already in the map
  collect_optimizers(trainer, &state);
  collect_variables(trainer, &state);
  collect_counters(trainer, &state);
  collect_rng(&state);
  collect_callbacks(trainer, &state);
  return state;
}

RestoreReport restore_training_state(Trainer& trainer, const TensorMap& state,
                                     const RestoreOptions& options) {
  RestoreReport report;
  Reader in(state, options, &report);
  // The module tensors, the optimizers' entries and the counters are checked before anything
  // changes: a refused restore applies nothing, the counters of another run included.
  if (options.restore_counters() && !in.ignored(kGlobalStep)) {
    (void)saved_resume_point(state, options.source());
    if (state.count(kStepsPerEpoch)) (void)scalar_int(state, kStepsPerEpoch, options.source(), 0);
  }
  ModulesRestore modules = ModulesRestore::prepare(trainer, &in);
  OptimizersRestore optimizers = OptimizersRestore::prepare(trainer, &in);
  optimizers.apply_archives();
  optimizers.apply_typed();
  modules.apply();
  restore_variables(trainer, &in);
  restore_rng(&in);
  restore_callbacks(trainer, &in);
  restore_counters(trainer, &in);
  in.finish();
  return report;
}

std::optional<ResumePoint> saved_resume_point(const TensorMap& state, const std::string& source) {
  if (!state.count(kGlobalStep) || !state.count(kEpoch) || !state.count(kStepInEpoch)) {
    return std::nullopt;
  }
  ResumePoint point;
  point.global_step = scalar_int(state, kGlobalStep, source, 0);
  point.epoch = scalar_int(state, kEpoch, source, 1);
  point.step_in_epoch = scalar_int(state, kStepInEpoch, source, 0);
  return point;
}

bool is_model_entry(const std::string& entry) {
  return !(entry == kOptimizerPrefix || starts_with(entry, std::string(kOptimizerPrefix) + "/") ||
           starts_with(entry, kVariablePrefix) || starts_with(entry, kCallbackPrefix) ||
           starts_with(entry, "trainer/") || starts_with(entry, "rng/"));
}

std::vector<std::string> non_finite_model_entries(const TensorMap& state) {
  std::vector<std::string> out;
  for (const auto& [entry, tensor] : state) {
    if (!is_model_entry(entry) || !tensor.defined() || !tensor.is_floating_point()) continue;
    if (!at::isfinite(tensor).all().item<bool>()) out.push_back(entry);
  }
  return out;
}

}  // namespace trainpack
