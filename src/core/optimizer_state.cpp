// Optimizer state as checkpoint entries (trainpack/core/optimizer_state.h): one codec per known
// LibTorch optimizer class names its options and per-parameter state fields once; the same
// description drives collecting (a Collector visitor) and restoring (reader visitors that check
// and copy). Other optimizers go through their torch::serialize archive.
#include "trainpack/core/optimizer_state.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim.h>
#include <torch/serialize/archive.h>

#include <sstream>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "trainpack/detail/torch_compat.h"
#include "trainpack/utils/demangle.h"

namespace trainpack {
namespace {

namespace optim = torch::optim;

using StateMap = std::decay_t<decltype(std::declval<optim::Optimizer&>().state())>;
using StateKey = StateMap::key_type;
using Betas = std::tuple<double, double>;

// The key of a parameter in Optimizer::state() (it differs between LibTorch versions).
StateKey state_key(const at::Tensor& param) { return compat::optimizer_state_key<StateMap>(param); }

// `t`'s sizes, as "[2, 3]". Not `shape_of`: src/callbacks/{tensors,hooks}.cpp define one each,
// and a unity batch of the library may hold this file and one of them.
std::string shape_text(const at::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes(), ", "));
}

// ---- The codecs: what each known optimizer class holds ----
// options(v, o) visits every option of a parameter group; state(v, s, o) every field of one
// parameter's state, with `required` saying whether the field must exist under options `o` (as
// the class's step() creates them).

template <class Optim>
struct Codec;

template <>
struct Codec<optim::SGD> {
  using Options = optim::SGDOptions;
  using State = optim::SGDParamState;
  static constexpr const char* kName = "SGD";
  template <class V, class O>
  static void options(V& v, O& o) {
    v.real("lr", o.lr());
    v.real("momentum", o.momentum());
    v.real("dampening", o.dampening());
    v.real("weight_decay", o.weight_decay());
    v.flag("nesterov", o.nesterov());
  }
  template <class V, class S>
  static void state(V& v, S& s, const Options&) {
    v.tensor("momentum_buffer", s.momentum_buffer(), true);
  }
};

// Adam and AdamW have the same options and state (AdamW applies the weight decay differently).
template <class OptionsT, class StateT>
struct AdamCodec {
  using Options = OptionsT;
  using State = StateT;
  template <class V, class O>
  static void options(V& v, O& o) {
    v.real("lr", o.lr());
    v.pair("betas", o.betas());
    v.real("eps", o.eps());
    v.real("weight_decay", o.weight_decay());
    v.flag("amsgrad", o.amsgrad());
  }
  template <class V, class S>
  static void state(V& v, S& s, const Options& o) {
    v.count("step", s.step(), true);
    v.tensor("exp_avg", s.exp_avg(), true);
    v.tensor("exp_avg_sq", s.exp_avg_sq(), true);
    v.tensor("max_exp_avg_sq", s.max_exp_avg_sq(), o.amsgrad());
  }
};

template <>
struct Codec<optim::Adam> : AdamCodec<optim::AdamOptions, optim::AdamParamState> {
  static constexpr const char* kName = "Adam";
};

template <>
struct Codec<optim::AdamW> : AdamCodec<optim::AdamWOptions, optim::AdamWParamState> {
  static constexpr const char* kName = "AdamW";
};

template <>
struct Codec<optim::RMSprop> {
  using Options = optim::RMSpropOptions;
  using State = optim::RMSpropParamState;
  static constexpr const char* kName = "RMSprop";
  template <class V, class O>
  static void options(V& v, O& o) {
    v.real("lr", o.lr());
    v.real("alpha", o.alpha());
    v.real("eps", o.eps());
    v.real("weight_decay", o.weight_decay());
    v.real("momentum", o.momentum());
    v.flag("centered", o.centered());
  }
  template <class V, class S>
  static void state(V& v, S& s, const Options& o) {
    v.count("step", s.step(), true);
    v.tensor("square_avg", s.square_avg(), true);
    v.tensor("momentum_buffer", s.momentum_buffer(), o.momentum() > 0);
    v.tensor("grad_avg", s.grad_avg(), o.centered());
  }
};

template <>
struct Codec<optim::Adagrad> {
  using Options = optim::AdagradOptions;
  using State = optim::AdagradParamState;
  static constexpr const char* kName = "Adagrad";
  template <class V, class O>
  static void options(V& v, O& o) {
    v.real("lr", o.lr());
    v.real("lr_decay", o.lr_decay());
    v.real("weight_decay", o.weight_decay());
    v.real("initial_accumulator_value", o.initial_accumulator_value());
    v.real("eps", o.eps());
  }
  template <class V, class S>
  static void state(V& v, S& s, const Options&) {
    v.count("step", s.step(), true);
    v.tensor("sum", s.sum(), true);
  }
};

// Calls f(optimizer as its exact class) for the known classes; false for any other class.
template <class Base, class Derived>
using SameConst = std::conditional_t<std::is_const_v<Base>, const Derived, Derived>;

template <class O, class F>
bool visit_typed(O& optimizer, F&& f) {
  const std::type_info& type = typeid(optimizer);
  if (type == typeid(optim::SGD)) {
    f(static_cast<SameConst<O, optim::SGD>&>(optimizer));
  } else if (type == typeid(optim::Adam)) {
    f(static_cast<SameConst<O, optim::Adam>&>(optimizer));
  } else if (type == typeid(optim::AdamW)) {
    f(static_cast<SameConst<O, optim::AdamW>&>(optimizer));
  } else if (type == typeid(optim::RMSprop)) {
    f(static_cast<SameConst<O, optim::RMSprop>&>(optimizer));
  } else if (type == typeid(optim::Adagrad)) {
    f(static_cast<SameConst<O, optim::Adagrad>&>(optimizer));
  } else {
    return false;
  }
  return true;
}

// The options of a group as the class's own type (LibTorch's step() assumes it; checked here).
template <class C, class Group>
auto& options_of(Group& group, size_t g, const char* who) {
  using Options = SameConst<Group, typename C::Options>;
  auto* o = dynamic_cast<Options*>(&group.options());
  if (o == nullptr) {
    throw std::logic_error(
        fmt::format("{}: the options of parameter group {} of a torch::optim::{} "
                    "are not {}Options",
                    who, g, C::kName, C::kName));
  }
  return *o;
}

at::Tensor bytes_tensor(const std::string& s) {
  at::Tensor t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
  std::copy(s.begin(), s.end(), reinterpret_cast<char*>(t.data_ptr<uint8_t>()));
  return t;
}

std::string tensor_bytes(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU).contiguous();
  return std::string(reinterpret_cast<const char*>(c.data_ptr<uint8_t>()),
                     static_cast<size_t>(c.numel()));
}

// ---- Collecting ----

class Collector {
 public:
  Collector(TensorMap* state, std::string prefix) : state_(state), prefix_(std::move(prefix)) {}

  void real(const char* name, double v) { put(name, at::scalar_tensor(v, at::kDouble)); }
  void flag(const char* name, bool v) { put(name, at::scalar_tensor(v, at::kBool)); }
  void pair(const char* name, const Betas& v) {
    at::Tensor t = at::empty({2}, at::kDouble);
    t.data_ptr<double>()[0] = std::get<0>(v);
    t.data_ptr<double>()[1] = std::get<1>(v);
    put(name, std::move(t));
  }
  void count(const char* name, int64_t v, bool) { put(name, at::scalar_tensor(v, at::kLong)); }
  void tensor(const char* name, const at::Tensor& t, bool) {
    if (!t.defined()) return;  // an optional field the options do not use
    put(name, checkpoint_form(t));
  }

  void put(const std::string& name, at::Tensor t) {
    std::string key = prefix_ + name;
    if (!state_->emplace(key, std::move(t)).second) {
      throw std::logic_error(
          fmt::format("collect_training_state: two entries are named '{}' (optimizer state)", key));
    }
  }

 private:
  TensorMap* state_;
  std::string prefix_;
};

template <class Optim>
void collect_typed(const Optim& optimizer, const std::string& entry, TensorMap* state) {
  using C = Codec<Optim>;
  const auto& groups = optimizer.param_groups();
  Collector meta(state, entry + "/");
  meta.put("type", bytes_tensor(C::kName));
  at::Tensor sizes = at::empty({static_cast<int64_t>(groups.size())}, at::kLong);
  for (size_t g = 0; g < groups.size(); ++g) {
    sizes.data_ptr<int64_t>()[g] = static_cast<int64_t>(groups[g].params().size());
  }
  meta.put("group_sizes", std::move(sizes));
  const auto& states = optimizer.state();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& options = options_of<C>(groups[g], g, "collect_training_state");
    Collector group(state, fmt::format("{}/{}/", entry, g));
    C::options(group, options);
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto it = states.find(state_key(params[i]));
      if (it == states.end()) continue;  // no state yet (e.g. no gradient so far)
      const auto& s = static_cast<const typename C::State&>(*it->second);
      Collector param(state, fmt::format("{}/{}/{}/", entry, g, i));
      C::state(param, s, options);
    }
  }
}

// ---- Restoring ----

// The entries of one optimizer in the map being restored: lookups under `<entry>/`, the names
// read, and the error messages.
class Entries {
 public:
  Entries(const TensorMap& map, std::string entry, std::string source)
      : map_(map), entry_(std::move(entry)), source_(std::move(source)) {}

  std::string full(const std::string& name) const { return entry_ + "/" + name; }

  const at::Tensor* find(const std::string& name) {
    const auto it = map_.find(full(name));
    if (it == map_.end()) return nullptr;
    read_.push_back(it->first);
    return &it->second;
  }
  const at::Tensor& require(const std::string& name) {
    const at::Tensor* t = find(name);
    if (t == nullptr) fail(name, "is missing");
    return *t;
  }
  // A number or a small vector of numbers: exactly this dtype and shape.
  const at::Tensor& require_number(const std::string& name, at::ScalarType dtype,
                                   at::IntArrayRef shape) {
    const at::Tensor& t = require(name);
    check_number(name, t, dtype, shape);
    return t;
  }
  void check_number(const std::string& name, const at::Tensor& t, at::ScalarType dtype,
                    at::IntArrayRef shape) const {
    if (!t.defined() || t.scalar_type() != dtype || t.sizes() != shape) {
      fail(name, fmt::format("should be {} of shape [{}], but is {} of shape {}",
                             c10::toString(dtype), fmt::join(shape, ", "),
                             t.defined() ? c10::toString(t.scalar_type()) : "undefined",
                             t.defined() ? shape_text(t) : "[]"));
    }
  }
  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    throw std::invalid_argument(
        fmt::format("restoring from {}: '{}' {}", source_, full(name), what));
  }

  std::vector<std::string>& read() { return read_; }

 private:
  const TensorMap& map_;
  std::string entry_;
  std::string source_;
  std::vector<std::string> read_;
};

class OptionReader {
 public:
  OptionReader(Entries* in, std::string prefix) : in_(in), prefix_(std::move(prefix)) {}
  void real(const char* name, double& v) {
    v = in_->require_number(prefix_ + name, at::kDouble, {}).item<double>();
  }
  void flag(const char* name, bool& v) {
    v = in_->require_number(prefix_ + name, at::kBool, {}).item<bool>();
  }
  void pair(const char* name, Betas& v) {
    const at::Tensor t = in_->require_number(prefix_ + name, at::kDouble, {2}).to(at::kCPU);
    v = Betas(t[0].item<double>(), t[1].item<double>());
  }

 private:
  Entries* in_;
  std::string prefix_;
};

// Reads one parameter's state. The parameter has a state when any of its fields is there; then
// every field that the options require must be.
class StateReader {
 public:
  StateReader(Entries* in, std::string prefix, const at::Tensor& param)
      : in_(in), prefix_(std::move(prefix)), param_(param) {}

  void count(const char* name, int64_t& v, bool required) {
    const at::Tensor* t = note(name, required);
    if (t == nullptr) return;
    in_->check_number(prefix_ + name, *t, at::kLong, {});
    v = t->item<int64_t>();
  }
  void tensor(const char* name, at::Tensor& out, bool required) {
    const at::Tensor* t = note(name, required);
    if (t == nullptr) return;
    if (!t->defined() || t->sizes() != param_.sizes()) {
      in_->fail(prefix_ + name,
                fmt::format("has shape {} there, but its parameter has {}",
                            t->defined() ? shape_text(*t) : "(undefined)", shape_text(param_)));
    }
    if (t->scalar_type() != param_.scalar_type()) {
      in_->fail(prefix_ + name,
                fmt::format("is {} there, but its parameter is {}", c10::toString(t->scalar_type()),
                            c10::toString(param_.scalar_type())));
    }
    // A copy: the optimizer updates it in place, and the map may be the caller's (DictRestore).
    out = t->to(param_.device(), t->scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  }

  bool has_state() const { return found_; }
  // Throws for the first required field that is missing, when the parameter has a state.
  void check_complete() const {
    if (found_ && !missing_.empty()) {
      in_->fail(missing_, "is missing (the other state entries of its parameter are there)");
    }
  }

 private:
  const at::Tensor* note(const char* name, bool required) {
    const at::Tensor* t = in_->find(prefix_ + name);
    if (t != nullptr) {
      found_ = true;
    } else if (required && missing_.empty()) {
      missing_ = prefix_ + name;
    }
    return t;
  }

  Entries* in_;
  std::string prefix_;
  const at::Tensor& param_;
  bool found_ = false;
  std::string missing_;
};

}  // namespace

class OptimizerRestore::Plan {
 public:
  virtual ~Plan() = default;
  virtual void apply() = 0;
};

namespace {

template <class Optim>
class TypedPlan : public OptimizerRestore::Plan {
 public:
  using C = Codec<Optim>;
  explicit TypedPlan(Optim* optimizer) : optimizer_(optimizer) {}

  void apply() override {
    auto& groups = optimizer_->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      options_of<C>(groups[g], g, "restore_training_state") = options_[g];
    }
    optimizer_->state() = std::move(state_);
  }

  Optim* optimizer_;
  std::vector<typename C::Options> options_;  // one per group
  StateMap state_;                            // the optimizer's whole new state
};

template <class Optim>
std::unique_ptr<OptimizerRestore::Plan> prepare_typed(Optim& optimizer, Entries* in) {
  using C = Codec<Optim>;
  const at::Tensor& type = in->require("type");
  const std::string saved = type.defined() && type.scalar_type() == at::kByte && type.dim() == 1
                                ? tensor_bytes(type)
                                : std::string("?");
  if (saved != C::kName) {
    in->fail("type", fmt::format("says the state is of a torch::optim::{}, but the optimizer is a "
                                 "torch::optim::{}",
                                 saved, C::kName));
  }
  auto& groups = optimizer.param_groups();
  const at::Tensor& saved_sizes = in->require("group_sizes");
  if (!saved_sizes.defined() || saved_sizes.scalar_type() != at::kLong || saved_sizes.dim() != 1) {
    in->check_number("group_sizes", saved_sizes, at::kLong, {static_cast<int64_t>(groups.size())});
  }
  if (saved_sizes.numel() != static_cast<int64_t>(groups.size())) {
    in->fail("group_sizes", fmt::format("lists {} parameter groups, but the optimizer has {}",
                                        saved_sizes.numel(), groups.size()));
  }
  const at::Tensor sizes = saved_sizes.to(at::kCPU);
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t n = sizes[static_cast<int64_t>(g)].item<int64_t>();
    if (n != static_cast<int64_t>(groups[g].params().size())) {
      in->fail("group_sizes",
               fmt::format("says parameter group {} has {} parameters, but it has {} in the "
                           "optimizer",
                           g, n, groups[g].params().size()));
    }
  }
  auto plan = std::make_unique<TypedPlan<Optim>>(&optimizer);
  for (size_t g = 0; g < groups.size(); ++g) {
    typename C::Options options = options_of<C>(groups[g], g, "restore_training_state");
    OptionReader option_reader(in, fmt::format("{}/", g));
    C::options(option_reader, options);
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      auto s = std::make_unique<typename C::State>();
      StateReader reader(in, fmt::format("{}/{}/", g, i), params[i]);
      C::state(reader, *s, options);
      if (!reader.has_state()) continue;
      reader.check_complete();
      plan->state_[state_key(params[i])] = std::move(s);
    }
    plan->options_.push_back(std::move(options));
  }
  return plan;
}

class ArchivePlan : public OptimizerRestore::Plan {
 public:
  ArchivePlan(optim::Optimizer* optimizer, std::string entry, std::string source)
      : optimizer_(optimizer), entry_(std::move(entry)), source_(std::move(source)) {}

  void apply() override {
    try {
      optimizer_->load(archive_);
    } catch (const c10::Error& e) {
      throw std::invalid_argument(
          fmt::format("restoring from {}: '{}' does not fit the optimizer: {}", source_, entry_,
                      e.what_without_backtrace()));
    }
  }

  torch::serialize::InputArchive archive_;

 private:
  optim::Optimizer* optimizer_;
  std::string entry_;
  std::string source_;
};

}  // namespace

bool has_typed_optimizer_state(const torch::optim::Optimizer& optimizer) {
  return visit_typed(optimizer, [](const auto&) {});
}

void collect_optimizer_state(const torch::optim::Optimizer& optimizer, const std::string& entry,
                             TensorMap* state) {
  const bool typed =
      visit_typed(optimizer, [&](const auto& typed) { collect_typed(typed, entry, state); });
  if (typed) return;
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  Collector(state, "").put(entry, bytes_tensor(bytes.str()));
}

OptimizerRestore::OptimizerRestore(std::unique_ptr<Plan> plan, std::vector<std::string> entries)
    : plan_(std::move(plan)), entries_(std::move(entries)) {}
OptimizerRestore::OptimizerRestore(OptimizerRestore&&) noexcept = default;
OptimizerRestore& OptimizerRestore::operator=(OptimizerRestore&&) noexcept = default;
OptimizerRestore::~OptimizerRestore() = default;

std::optional<OptimizerRestore> OptimizerRestore::prepare(torch::optim::Optimizer& optimizer,
                                                          const std::string& entry,
                                                          const TensorMap& state,
                                                          const std::string& source) {
  // An archive (any class; what trainpack wrote for every optimizer before): decoded here, loaded
  // by apply().
  if (const auto it = state.find(entry); it != state.end()) {
    const at::Tensor& t = it->second;
    if (!t.defined() || t.scalar_type() != at::kByte || t.dim() != 1) {
      throw std::invalid_argument(fmt::format(
          "restoring from {}: '{}' should be an optimizer archive (Byte of shape [n]), but is {} "
          "of shape {}",
          source, entry, t.defined() ? c10::toString(t.scalar_type()) : "undefined",
          t.defined() ? shape_text(t) : "[]"));
    }
    const std::string bytes = tensor_bytes(t);
    auto plan = std::make_unique<ArchivePlan>(&optimizer, entry, source);
    try {
      plan->archive_.load_from(bytes.data(), bytes.size());
    } catch (const c10::Error& e) {
      throw std::invalid_argument(
          fmt::format("restoring from {}: '{}' is not an optimizer archive: {}", source, entry,
                      e.what_without_backtrace()));
    }
    OptimizerRestore restore(std::move(plan), {entry});
    restore.from_archive_ = true;
    return restore;
  }
  Entries in(state, entry, source);
  if (in.find("type") == nullptr) return std::nullopt;
  in.read().clear();
  std::unique_ptr<Plan> plan;
  const bool typed = visit_typed(optimizer, [&](auto& typed) { plan = prepare_typed(typed, &in); });
  if (!typed) {
    const at::Tensor& type = in.require("type");
    in.fail("type",
            fmt::format("holds the state of a torch::optim::{}, but the optimizer is a {} "
                        "(its state is saved as the archive '{}')",
                        type.scalar_type() == at::kByte && type.dim() == 1 ? tensor_bytes(type)
                                                                           : std::string("?"),
                        type_name(typeid(optimizer)), entry));
  }
  return OptimizerRestore(std::move(plan), std::move(in.read()));
}

void OptimizerRestore::apply() {
  if (plan_) plan_->apply();
  plan_.reset();
}

}  // namespace trainpack
