#include "trainpack/train/state.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "trainpack/graph.h"
#include "trainpack/train/optimizer_state.h"
#include "trainpack/train/trainer.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace {

constexpr const char* kOptimizerPrefix = "optimizer";
constexpr const char* kVariablePrefix = "variable/";
constexpr const char* kTrainerPrefix = "trainer/";
constexpr const char* kRngPrefix = "rng/";
constexpr const char* kCallbackPrefix = "callback/";
constexpr const char* kGlobalStep = "trainer/global_step";
constexpr const char* kEpoch = "trainer/epoch";
constexpr const char* kStepInEpoch = "trainer/step_in_epoch";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string module_entry(const std::string& module_name, const std::string& tensor_name) {
  return module_name.empty() ? tensor_name : module_name + "/" + tensor_name;
}

std::string optimizer_entry(const std::string& name) {
  return name.empty() ? kOptimizerPrefix : std::string(kOptimizerPrefix) + "/" + name;
}

// The callbacks with their checkpoint keys: name(), then name#2, name#3 for repeats.
std::vector<std::pair<std::string, Callback*>> keyed_callbacks(const Trainer& trainer) {
  std::vector<std::pair<std::string, Callback*>> out;
  std::map<std::string, int> seen;
  for (const auto& cb : trainer.registered_callbacks()) {
    const std::string name = cb->name();
    const int n = ++seen[name];
    out.emplace_back(n == 1 ? name : fmt::format("{}#{}", name, n), cb.get());
  }
  return out;
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

std::vector<std::pair<std::string, at::Generator>> generators() {
  std::vector<std::pair<std::string, at::Generator>> out;
  out.emplace_back("rng/cpu", at::detail::getDefaultCPUGenerator());
  if (at::globalContext().hasCUDA()) {
    const auto& hooks = at::detail::getCUDAHooks();
    for (int i = 0; i < hooks.getNumGPUs(); ++i) {
      out.emplace_back(fmt::format("rng/cuda:{}", i),
                       hooks.getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(i)));
    }
  }
  return out;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

int64_t scalar_int(const TensorMap& state, const char* key, const std::string& source) {
  const at::Tensor& t = state.at(key);
  if (t.numel() != 1) {
    throw std::invalid_argument(fmt::format("{}: '{}' should hold one number, but has shape {}",
                                            source, key, fmt::join(t.sizes(), "x")));
  }
  return t.item<int64_t>();
}

}  // namespace

at::Tensor checkpoint_form(const at::Tensor& t) {
  at::Tensor out = t.requires_grad() ? t.detach() : t;
  return out.is_cpu() ? out : out.to(at::kCPU);
}

TensorMap collect_training_state(const Trainer& trainer) {
  TensorMap state;
  for (auto& [entry, tensor] : module_tensors(trainer)) {
    if (!state.emplace(entry, checkpoint_form(tensor)).second) {
      throw std::logic_error(
          fmt::format("collect_training_state: two module tensors are named '{}'", entry));
    }
  }
  for (const auto& [name, optimizer] : trainer.graph().optimizers()) {
    collect_optimizer_state(*optimizer, optimizer_entry(name), &state);
  }
  const Graph& graph = trainer.graph();
  for (const auto& name : graph.variable_names()) {
    if (name == "global_step") continue;  // a counter: trainer/global_step
    const Graph::Variable& v = graph.variable(name);
    state[kVariablePrefix + name] =
        v.is_floating ? at::scalar_tensor(v.get(), at::kDouble)
                      : at::scalar_tensor(static_cast<int64_t>(v.get()), at::kLong);
  }
  const ResumePoint point = trainer.resume_point();
  state[kGlobalStep] = at::scalar_tensor(point.global_step, at::kLong);
  state[kEpoch] = at::scalar_tensor(point.epoch, at::kLong);
  state[kStepInEpoch] = at::scalar_tensor(point.step_in_epoch, at::kLong);
  for (auto& [entry, gen] : generators()) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state[entry] = gen.get_state();
  }
  for (const auto& [key, cb] : keyed_callbacks(trainer)) {
    for (auto& [name, tensor] : cb->state()) {
      state[kCallbackPrefix + key + "/" + name] = checkpoint_form(tensor);
    }
  }
  return state;
}

RestoreReport restore_training_state(Trainer& trainer, const TensorMap& state,
                                     const RestoreOptions& options) {
  RestoreReport report;
  const std::string& source = options.source();
  auto ignored = [&](const std::string& entry) {
    for (const auto& pattern : options.ignore()) {
      if (entry == pattern) return true;
      if (!pattern.empty() && pattern.back() == '/' && starts_with(entry, pattern)) return true;
    }
    return false;
  };
  std::set<std::string> used;  // entries of `state` that the trainer has a place for
  auto take = [&](const std::string& entry) -> const at::Tensor* {
    auto it = state.find(entry);
    if (it == state.end()) return nullptr;
    used.insert(entry);
    if (ignored(entry)) {
      report.ignored.push_back(entry);
      TP_LOG_INFO("Variable {} in the graph will not be loaded from {}!", entry, source);
      return nullptr;
    }
    return &it->second;
  };

  // 1. Check every module tensor before changing anything.
  const auto tensors = module_tensors(trainer);
  std::vector<std::pair<at::Tensor, const at::Tensor*>> copies;
  for (const auto& [entry, tensor] : tensors) {
    const at::Tensor* value = take(entry);
    if (value == nullptr) {
      if (!state.count(entry)) report.missing.push_back(entry);
      continue;
    }
    if (value->sizes() != tensor.sizes()) {
      throw std::invalid_argument(
          fmt::format("restoring from {}: '{}' has shape [{}] there, but [{}] in the model", source,
                      entry, fmt::join(value->sizes(), ", "), fmt::join(tensor.sizes(), ", ")));
    }
    if (value->scalar_type() != tensor.scalar_type()) {
      throw std::invalid_argument(
          fmt::format("restoring from {}: '{}' is {} there, but {} in the model", source, entry,
                      c10::toString(value->scalar_type()), c10::toString(tensor.scalar_type())));
    }
    copies.emplace_back(tensor, value);
    report.restored.push_back(entry);
  }
  // 2. The optimizers: read and check every entry (OptimizerRestore::prepare) before changing
  // anything. An optimizer's entries are restored all together or not at all: when any of them
  // is ignored, all are.
  std::vector<OptimizerRestore> optimizer_restores;
  const auto& optimizers = trainer.graph().optimizers();
  for (const auto& [name, optimizer] : optimizers) {
    const std::string entry = optimizer_entry(name);
    const std::vector<std::string> own = optimizer_entries(state, entry, optimizers);
    if (std::any_of(own.begin(), own.end(), ignored)) {
      for (const auto& e : own) {
        used.insert(e);
        report.ignored.push_back(e);
        TP_LOG_INFO("Variable {} in the graph will not be loaded from {}!", e, source);
      }
      continue;
    }
    auto restore = OptimizerRestore::prepare(*optimizer, entry, state, source);
    if (!restore) {
      report.missing_training_only.push_back(has_typed_optimizer_state(*optimizer) ? entry + "/*"
                                                                                   : entry);
      continue;
    }
    for (const auto& e : restore->entries()) {
      used.insert(e);
      report.restored.push_back(e);
    }
    optimizer_restores.push_back(std::move(*restore));
  }

  // Archives first: Optimizer::load is the one step that may still refuse (then nothing else
  // has changed, unless an earlier archive was loaded).
  for (auto& restore : optimizer_restores) {
    if (restore.from_archive()) restore.apply();
  }
  for (auto& restore : optimizer_restores) {
    if (!restore.from_archive()) restore.apply();
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& [tensor, value] : copies) tensor.copy_(*value);
  }

  // 3. Graph variables.
  Graph& graph = trainer.graph();
  for (const auto& name : graph.variable_names()) {
    if (name == "global_step") continue;
    const std::string entry = kVariablePrefix + name;
    const at::Tensor* value = take(entry);
    if (value == nullptr) {
      if (!state.count(entry)) report.missing.push_back(entry);
      continue;
    }
    graph.variable(name).set(value->item<double>());
    report.restored.push_back(entry);
  }

  // 4. Random number generators.
  for (auto& [entry, gen] : generators()) {
    const at::Tensor* value = take(entry);
    if (value == nullptr) {
      if (!state.count(entry)) report.missing_training_only.push_back(entry);
      continue;
    }
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(*value);
    report.restored.push_back(entry);
  }

  // 5. Callback states: the entries under each callback's key. Names may hold '/' (e.g.
  // "QueueInput" and "QueueInput/queue_size"), so an entry belongs to the callback with the
  // longest key that prefixes it, never to a shorter key that happens to prefix it too.
  const auto keyed = keyed_callbacks(trainer);
  std::vector<CallbackState> cb_states(keyed.size());
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
    if (owner == keyed.size()) continue;  // no such callback: reported as unused below
    if (const at::Tensor* value = take(it->first)) {
      cb_states[owner][it->first.substr(owner_key_length)] = *value;
    }
  }
  for (size_t i = 0; i < keyed.size(); ++i) {
    const std::string prefix = kCallbackPrefix + keyed[i].first + "/";
    Callback* cb = keyed[i].second;
    if (cb_states[i].empty()) {
      if (!cb->state().empty()) report.missing_training_only.push_back(prefix + "*");
      continue;
    }
    cb->load_state(cb_states[i]);
    for (const auto& kv : cb_states[i]) report.restored.push_back(prefix + kv.first);
  }

  // 6. Counters: where to continue.
  const bool has_counters =
      state.count(kGlobalStep) && state.count(kEpoch) && state.count(kStepInEpoch);
  for (const char* entry : {kGlobalStep, kEpoch, kStepInEpoch}) {
    if (state.count(entry)) used.insert(entry);
  }
  if (has_counters && options.restore_counters() && !ignored(kGlobalStep)) {
    trainer.set_resume_point(*saved_resume_point(state, source));
    for (const char* entry : {kGlobalStep, kEpoch, kStepInEpoch}) report.restored.push_back(entry);
  } else if (!has_counters) {
    report.missing_training_only.push_back("trainer/*");
  }

  for (const auto& kv : state) {
    if (used.count(kv.first)) continue;
    // An entry the trainer has no place for, but that the user asked to ignore, is ignored, not
    // reported as unused.
    if (ignored(kv.first)) {
      report.ignored.push_back(kv.first);
    } else {
      report.unused.push_back(kv.first);
    }
  }
  if (!report.missing.empty()) {
    TP_LOG_WARN("The following variables are in the graph, but not found in {}: {}", source,
                join_names(report.missing));
  }
  if (!report.unused.empty()) {
    TP_LOG_WARN("The following variables are in {}, but not found in the graph: {}", source,
                join_names(report.unused));
  }
  if (!report.missing_training_only.empty()) {
    TP_LOG_INFO("Training-only state not found in {}, kept as it is: {}", source,
                join_names(report.missing_training_only));
  }
  return report;
}

std::optional<ResumePoint> saved_resume_point(const TensorMap& state, const std::string& source) {
  if (!state.count(kGlobalStep) || !state.count(kEpoch) || !state.count(kStepInEpoch)) {
    return std::nullopt;
  }
  ResumePoint point;
  point.global_step = scalar_int(state, kGlobalStep, source);
  point.epoch = scalar_int(state, kEpoch, source);
  point.step_in_epoch = scalar_int(state, kStepInEpoch, source);
  return point;
}

}  // namespace trainpack
