#include "trainpack/core/callback.h"

#include <fmt/format.h>

#include <stdexcept>
#include <typeinfo>

#include "trainpack/core/graph.h"
#include "trainpack/core/trainer.h"
#include "trainpack/detail/override_detection.h"
#include "trainpack/utils/demangle.h"

namespace trainpack {

const char* hook_name(Hook hook) {
  switch (hook) {
    case Hook::kSetupGraph:
      return "setup_graph";
    case Hook::kBeforeTrain:
      return "before_train";
    case Hook::kBeforeEpoch:
      return "before_epoch";
    case Hook::kBeforeRun:
      return "before_run";
    case Hook::kAfterRun:
      return "after_run";
    case Hook::kTriggerStep:
      return "trigger_step";
    case Hook::kAfterEpoch:
      return "after_epoch";
    case Hook::kTriggerEpoch:
      return "trigger_epoch";
    case Hook::kTrigger:
      return "trigger";
    case Hook::kAfterTrain:
      return "after_train";
  }
  return "?";
}

namespace detail {
const Callback& plain_callback() {
  // A callback that overrides nothing: its vtable holds the defaults to compare against.
  class PlainCallback final : public Callback {};
  static const PlainCallback plain;
  return plain;
}
}  // namespace detail

bool Callback::overrides_beyond(const Callback& reference, Hook hook) const {
  switch (hook) {
    case Hook::kSetupGraph:
      return detail::overrides_virtual<Callback>(*this, reference, &Callback::_setup_graph);
    case Hook::kBeforeTrain:
      return detail::overrides_virtual<Callback>(*this, reference, &Callback::_before_train);
    case Hook::kBeforeEpoch:
      return detail::overrides_virtual<Callback>(*this, reference, &Callback::_before_epoch);
    case Hook::kAfterEpoch:
      return detail::overrides_virtual<Callback>(*this, reference, &Callback::_after_epoch);
    case Hook::kBeforeRun:
      return detail::overrides_virtual<Callback>(*this, reference, &Callback::_before_run);
    case Hook::kAfterRun:
      return detail::overrides_virtual<Callback>(*this, reference, &Callback::_after_run);
    case Hook::kTriggerStep:
      return detail::overrides_virtual<Callback>(*this, reference, &Callback::_trigger_step);
    case Hook::kTriggerEpoch:
      return detail::overrides_virtual<Callback>(*this, reference, &Callback::_trigger_epoch);
    case Hook::kTrigger:
      return detail::overrides_virtual<Callback>(*this, reference, &Callback::_trigger);
    case Hook::kAfterTrain:
      return detail::overrides_virtual<Callback>(*this, reference, &Callback::_after_train);
  }
  return true;
}

bool Callback::overrides(Hook hook) const {
  const Callback& plain = detail::plain_callback();
  if (hook == Hook::kTriggerEpoch) {
    // The default _trigger_epoch calls trigger(): it matters when _trigger is overridden.
    return overrides_beyond(plain, Hook::kTriggerEpoch) || overrides_beyond(plain, Hook::kTrigger);
  }
  return overrides_beyond(plain, hook);
}

std::string Callback::name() const { return class_name(typeid(*this)); }

std::string Callback::name_scope() const {
  if (!name_scope_.empty()) return name_scope_;
  // From the class name, not name(): a wrapper or a setter may describe itself at length there.
  const std::string scope = class_name(typeid(*this));
  std::string out;
  for (char c : scope) {
    if (c != '_') out += c;
  }
  return out;
}

void Callback::setup_graph(Trainer& trainer) {
  trainer_ = &trainer;
  Graph::NameScope scope(trainer.graph(), enter_name_scope_ ? name_scope() : "",
                         /*from_root=*/true);
  _setup_graph();
}

Trainer& Callback::trainer() const {
  if (!trainer_) {
    throw std::logic_error(fmt::format(
        "Callback {}: trainer() was used before setup_graph(); register the callback with a "
        "trainer and use it from the hooks",
        name()));
  }
  return *trainer_;
}

Graph& Callback::graph() const { return trainer().graph(); }
int64_t Callback::epoch_num() const { return trainer().epoch_num(); }
int64_t Callback::global_step() const { return trainer().global_step(); }
int64_t Callback::local_step() const { return trainer().local_step(); }

ProxyCallback::ProxyCallback(CallbackPtr callback, const char* class_name)
    : callback_(std::move(callback)) {
  if (!callback_) throw std::invalid_argument(std::string(class_name) + ": callback is null");
  set_chief_only(callback_->chief_only());
  set_runs_on_every_rank(callback_->runs_on_every_rank());
}

CallbackPtr detail::unowned_plain_callback() {
  // Aliasing constructor: points at the static plain callback without owning it.
  return CallbackPtr(CallbackPtr(), const_cast<Callback*>(&plain_callback()));
}

bool ProxyCallback::overrides(Hook hook) const {
  // A proxy that only forwards: a subclass that overrides a hook beyond it adds behaviour.
  class PlainProxy final : public ProxyCallback {
   public:
    PlainProxy() : ProxyCallback(detail::unowned_plain_callback()) {}
  };
  static const PlainProxy reference;
  return overrides_beyond(reference, hook) || callback_->overrides(hook);
}

// The inner callback enters its own name scope from the root, as tensorpack's proxy does.
void ProxyCallback::_setup_graph() { callback_->setup_graph(trainer()); }

CallbackFactory::CallbackFactory(CallbackFactoryOptions options) : options_(std::move(options)) {}

std::string CallbackFactory::name() const {
  std::string given;
  auto add = [&](const CallbackFactoryOptions::Fn& f, const char* n) {
    if (!f) return;
    if (!given.empty()) given += ", ";
    given += n;
  };
  add(options_.setup_graph_, "setup_graph");
  add(options_.before_train_, "before_train");
  add(options_.trigger_, "trigger");
  add(options_.after_train_, "after_train");
  return "CallbackFactory(" + given + ")";
}

}  // namespace trainpack
