// What a hooked step passes around: RunArgs (what a callback asks for), StepContext (the step in
// progress), RunValues (what a callback gets back). tensorpack's SessionRunArgs,
// SessionRunContext and SessionRunValues.
//
// A step function publishes its named tensors with `ctx.publish(name, tensor)`; only the names
// some callback asked for this step are kept, so an unrequested tensor costs a name comparison
// and nothing else. After the step, every requested name must have been published: a missing one
// is an error that names the callback and lists the names the step does publish.
//
// Differences from tensorpack: fetches are names published by the step function, not graph
// tensors; there are no feeds or RunOptions; an op requested "with the step" runs right after the
// step function instead of inside the same session run.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainpack {

class Trainer;

// What a callback's before_run asks of the step: tensors to fetch by name, and closures to run
// along with the step (after the step function, before any after_run).
//
// Built per call (`return RunArgs({"cost"});`), or once and returned by reference with
// `RunArgs::ref(member_)` so that a per-step request allocates nothing.
class RunArgs {
 public:
  RunArgs() = default;
  RunArgs(std::initializer_list<std::string> fetches) : fetches_(fetches) {}
  explicit RunArgs(std::vector<std::string> fetches) : fetches_(std::move(fetches)) {}

  // A RunArgs that refers to `persistent`, which must outlive the step.
  static RunArgs ref(const RunArgs& persistent) {
    RunArgs r;
    r.ref_ = persistent.ref_ ? persistent.ref_ : &persistent;
    return r;
  }

  RunArgs& add_fetch(std::string name) {
    own().fetches_.push_back(std::move(name));
    return *this;
  }
  RunArgs& add_op(std::function<void()> op) {
    own().ops_.push_back(std::move(op));
    return *this;
  }

  const std::vector<std::string>& fetches() const { return ref_ ? ref_->fetches_ : fetches_; }
  const std::vector<std::function<void()>>& ops() const { return ref_ ? ref_->ops_ : ops_; }
  bool empty() const { return fetches().empty() && ops().empty(); }

 private:
  RunArgs& own() {
    if (ref_) {  // copy-on-write: a referencing RunArgs becomes its own when extended
      fetches_ = ref_->fetches_;
      ops_ = ref_->ops_;
      ref_ = nullptr;
    }
    return *this;
  }

  std::vector<std::string> fetches_;
  std::vector<std::function<void()>> ops_;
  const RunArgs* ref_ = nullptr;
};

// The step in progress: passed to before_run, to the step function and to after_run.
class StepContext {
 public:
  explicit StepContext(Trainer& trainer) : trainer_(&trainer) {}

  Trainer& trainer() const { return *trainer_; }

  // Asks the trainer to stop: the loop ends before the next step (or epoch) starts.
  void request_stop() const;
  bool stop_requested() const;

  // True if some callback asked for `name` in this step.
  bool is_requested(std::string_view name) const {
    for (const auto& entry : requested_) {
      if (entry.first == name) return true;
    }
    return false;
  }

  // Called by the step function for each named tensor it can produce. The tensor is kept only
  // if requested; the name is remembered so that errors can list what the step publishes.
  void publish(std::string_view name, const at::Tensor& tensor) {
    for (auto& entry : requested_) {
      if (entry.first == name) {
        entry.second = tensor;
        break;
      }
    }
    if (known_names_.find(name) == known_names_.end()) known_names_.emplace(name);
    if (recorder_) recorder_->emplace_back(std::string(name), tensor);
  }
  // While set (not null), every publish() is also appended to `*recorder`, requested or not: a
  // CUDA graph's capture records what the step publishes, to publish it again at each replay.
  void set_publish_recorder(std::vector<std::pair<std::string, at::Tensor>>* recorder) {
    recorder_ = recorder;
  }

  // True if `name` was requested and has been published in this run.
  bool has_value(std::string_view name) const {
    for (const auto& entry : requested_) {
      if (entry.first == name) return entry.second.defined();
    }
    return false;
  }

  // The tensor published under `name` this step. Throws std::out_of_range if it was not
  // requested or not published.
  const at::Tensor& fetched(std::string_view name) const;

  // Every name the step has published so far in this run (for error messages).
  const std::set<std::string, std::less<>>& published_names() const { return known_names_; }

  // True when every name requested in this run has been published (checked after every run).
  bool all_published() const {
    for (const auto& entry : requested_) {
      if (!entry.second.defined()) return false;
    }
    return true;
  }
  // The names requested in this run but not published, in the order they were requested.
  std::vector<std::string> missing_names() const;

 private:
  friend class Trainer;

  // Called by the trainer at the start of each hooked run.
  void begin_run() {
    for (auto& entry : requested_) entry.second = at::Tensor();
    requested_.clear();
  }
  void request(const std::string& name) {
    if (!is_requested(name)) requested_.emplace_back(name, at::Tensor());
  }

  Trainer* trainer_;
  std::vector<std::pair<std::string, at::Tensor>> requested_;
  std::set<std::string, std::less<>> known_names_;
  std::vector<std::pair<std::string, at::Tensor>>* recorder_ = nullptr;
};

// What a callback's after_run receives: the tensors it asked for in before_run, from that same
// step, by name or by position in its fetch list.
class RunValues {
 public:
  RunValues(const RunArgs* args, const StepContext* ctx) : args_(args), ctx_(ctx) {}

  // Number of fetched tensors (0 when the callback asked for nothing).
  size_t size() const { return args_ ? args_->fetches().size() : 0; }
  bool empty() const { return size() == 0; }
  const std::string& name(size_t i) const { return args_->fetches().at(i); }
  const at::Tensor& operator[](size_t i) const { return ctx_->fetched(name(i)); }
  const at::Tensor& operator[](std::string_view name) const { return ctx_->fetched(name); }

 private:
  const RunArgs* args_;
  const StepContext* ctx_;
};

// A step function run by Trainer::hooked_run.
using StepFn = std::function<void(StepContext&)>;

}  // namespace trainpack
