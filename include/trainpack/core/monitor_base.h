// Monitors (tensorpack's callbacks/monitor.py): where training statistics go.
// `trainer.monitors().put_scalar("cost", 0.3)` hands a value to every monitor (each one decides
// when to write or print it) and records it in the history that `get_history` / `get_latest` read
// (StatMonitorParamSetter, MinSaver, ...).
//
// Each put_* call (below) reaches every monitor, in list order, before the next step of its
// sequence starts (process_scalar, the history, then process_summary, say).
//
// Differences from tensorpack (docs/tensorpack-differences.md #25): scalars are doubles; images
// are tensors, cast to uint8 before process_image; put_summary takes a Summary by value; the
// history is kept here, not by a ScalarHistory monitor; the validation rounds are an addition.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainpack/core/callback.h"
#include "trainpack/utils/summary.h"

namespace trainpack {

// tensorpack's MonitorBase: a callback (so it gets every lifecycle hook) that also receives the
// processed data. Monitors are passed to the trainer separately from callbacks; a monitor in the
// callback list is an error. The monitors themselves (TFEventWriter, JSONWriter, ScalarPrinter,
// ...) are in `trainpack/callbacks/monitor.h`, which includes this file.
class MonitorBase : public Callback {
 public:
  MonitorBase() {
    set_chief_only(false);
    enter_name_scope_ = false;
  }
  // Called for every scalar put to the monitors, in put order (also for each scalar of a
  // summary given to put_summary, after tag normalisation).
  virtual void process_scalar(const std::string& /*name*/, double /*value*/) {}
  // Called by put_image with the image as a contiguous NHWC uint8 tensor on the CPU.
  virtual void process_image(const std::string& /*name*/, const at::Tensor& /*nhwc_uint8*/) {}
  // Called with every summary: those given to put_summary, and the ones that put_scalar and
  // put_image build.
  virtual void process_summary(const Summary& /*summary*/) {}
  // Called by put_event, with the step and wall time filled in.
  virtual void process_event(const Event& /*event*/) {}
};

using MonitorPtr = std::shared_ptr<MonitorBase>;

// Does nothing; stands in for a monitor that cannot work (e.g. no logger directory).
class NoOpMonitor : public MonitorBase {
 public:
  explicit NoOpMonitor(std::string name = "") : name_(std::move(name)) {}
  std::string name() const override {
    return name_.empty() ? "NoOpMonitor" : "NoOpMonitor(" + name_ + ")";
  }

 private:
  std::string name_;
};

// The aggregator: `trainer.monitors()`. Registered as the last callback; it forwards no
// lifecycle hook (each monitor is registered as a callback of its own).
class Monitors : public Callback {
 public:
  using History = std::vector<std::pair<int64_t, double>>;  // (global_step at put time, value)

  explicit Monitors(std::vector<MonitorPtr> monitors);

  // process_scalar(name, value) on every monitor, records (global_step, value) in the history,
  // then process_summary with a summary of this one scalar (tag `name`) on every monitor.
  void put_scalar(const std::string& name, double value);

  // Puts an image, or a batch of images. `image` is made NHWC: 4-D is NHWC; 3-D is HWC when the
  // last dimension is 1, 3 or 4 (a batch of one), else NHW (grey); 2-D is HW. Anything else
  // throws std::invalid_argument("Monitors::put_image('<name>'): array of shape [5] is not an
  // image"). Values are cast to uint8 as numpy's astype('uint8') does (no clipping: truncated
  // toward zero, wrapping modulo 256; NaN and infinities give an unspecified byte), on the CPU,
  // contiguous: every monitor's process_image gets that tensor. Then each image is PNG-encoded
  // (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA channels) into one summary, tagged `name` for a single
  // image and `name/<k>` for image k of a batch (one that cannot be encoded is skipped with a
  // warning), which every monitor's process_summary gets.
  void put_image(const std::string& name, const at::Tensor& image);

  // Puts a summary (e.g. built from tower summaries). Each scalar value's tag is normalised, as
  // tensorpack does for TensorFlow's summary names: every `tower<digits>/` is removed, then one
  // trailing `-summary` (`tower0/cost-summary` -> `cost`); process_scalar(tag, value) on every
  // monitor and the history follow, value by value. Images, histograms and text keep their tags
  // and reach only process_summary, which every monitor then gets with the normalised summary.
  void put_summary(Summary summary);

  // Sets `event.step` to the global step and `event.wall_time` to now (seconds since the Unix
  // epoch), then process_event on every monitor.
  void put_event(Event event);

  // Every (global_step, value) put under `name`, in put order; empty for an unknown name.
  const History& get_history(const std::string& name) const;
  // The last value put under `name`. Throws std::out_of_range when there is none:
  // "No available data for the key: <name>; the names with data: a, b" (tensorpack's message,
  // then what there is, so that a misspelt name shows itself; "none yet" when nothing was put).
  double get_latest(const std::string& name) const;
  // Every name that has a history, sorted (the training console lists them).
  std::vector<std::string> names() const;

  // Validation rounds. A callback that validates (InferenceRunner and DataParallelInferenceRunner
  // do; so should a callback of yours that puts statistics at some epoch ends only) calls
  // add_validator(*this) in its _setup_graph, and validation_done(*this) after putting each
  // round's statistics. The callbacks that read a stat by name (MinSaver/MaxSaver, EarlyStopping)
  // then take a name with no value once every validator has run (validators_have_run) as
  // misspelt, and before that as not validated yet. A callback is identified by its address;
  // adding one twice adds it once. validation_done of a callback not added is
  // std::invalid_argument naming it and add_validator.
  void add_validator(const Callback& validator);
  void validation_done(const Callback& validator);
  // Whether every validator added has called validation_done at least once (true when none was
  // added).
  bool validators_have_run() const;
  // The names of the validators added, in the order they were added.
  std::vector<std::string> validator_names() const;

  const std::vector<MonitorPtr>& monitors() const { return monitors_; }

 private:
  void record(const std::string& name, double value);
  int64_t current_step() const { return is_set_up() ? global_step() : 0; }

  // A validator added with add_validator, and whether it has validated yet.
  struct Validator {
    const Callback* callback;
    std::string name;
    bool done;
  };

  std::vector<MonitorPtr> monitors_;
  std::vector<Validator> validators_;
  std::map<std::string, History, std::less<>> history_;
  // The history put to last (history_.end(): none); map iterators stay valid as names are added.
  std::map<std::string, History, std::less<>>::iterator last_recorded_;
  // put_scalar's summary, reused (see put_scalar).
  Summary scalar_summary_;
  bool scalar_summary_busy_ = false;
};

namespace detail {
// put_image's conversion and encoding, shared with MergeAllSummaries; errors and warnings start
// with `who` ("Monitors::put_image('x')"). encode_image_value returns false for an image that
// cannot be encoded.
at::Tensor image_to_nhwc_uint8(const std::string& who, const at::Tensor& image);
bool encode_image_value(const char* who, const at::Tensor& nhwc_uint8, int64_t k, std::string tag,
                        SummaryValue* out);
// put_summary's tag normalisation for scalars.
std::string normalize_summary_tag(const std::string& tag);
// The check that MinSaver/MaxSaver and EarlyStopping make of the stat they read, at a trigger:
// nullopt while `stat` has a value or some validator has not validated yet; otherwise what is
// wrong ("'val-eror' has not been put by global_step=6 (epoch 3), though every validation has
// run (InferenceRunner). The stats put so far: cost, val-error."), for the caller to complete.
std::optional<std::string> missing_stat_problem(const Monitors& monitors, const std::string& stat,
                                                int64_t global_step, int64_t epoch);
}  // namespace detail

}  // namespace trainpack
