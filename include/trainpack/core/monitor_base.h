// Monitors: where training statistics go. `trainer.monitors().put_scalar("cost", 0.3)` hands a
// value to every monitor (each one decides when to write or print it) and records it in the
// history that `get_history` / `get_latest` read (StatMonitorParamSetter, MinSaver, ...).
//
// A monitor is a MonitorBase: a callback (so it gets every lifecycle hook) that also receives
// the processed data. Monitors are passed to the trainer separately from callbacks; a monitor in
// the callback list is an error. The monitors themselves (TFEventWriter, JSONWriter,
// ScalarPrinter, ...) are in `trainpack/callbacks/monitor.h`, which includes this file.
//
// What each put_* call does, in order (each call reaches every monitor, in list order, before
// the next call of the sequence starts):
//
//   put_scalar(name, v)   process_scalar(name, v); history; process_summary({name: v})
//   put_image(name, arr)  process_image(name, nhwc_uint8); process_summary(PNG images)
//   put_summary(s)        per scalar value: tag normalised, process_scalar(tag, v), history;
//                         then process_summary(s) (with the normalised tags)
//   put_event(e)          e.step = global_step, e.wall_time = now; process_event(e)
//
// Differences from tensorpack:
// - Scalars are doubles (stats.json prints them as Python floats); tensorpack keeps a Python
//   int an int.
// - put_image takes an at::Tensor on any device; monitors receive it already cast to uint8 (in
//   tensorpack process_image receives the array before the cast). A shape that is not an image
//   is std::invalid_argument naming the put (tensorpack: ValueError `Array of shape {shape} is
//   not an image!`). Images of 2 channels are encoded as grey+alpha PNGs (tensorpack hands them
//   to OpenCV, which does not encode 2 channels).
// - put_summary takes a Summary struct, not serialized protobuf bytes, by value: the caller's
//   object keeps its tags (tensorpack rewrites the caller's object in place).
// - The history is not a monitor of the list (tensorpack's ScalarHistory, always last); it is
//   recorded right after the monitors' process_scalar, at the same moment.
// - get_latest on a name without data throws std::out_of_range (tensorpack: KeyError) with the
//   same message; get_history of an unknown name is empty, as tensorpack's defaultdict gives.
// - The validation rounds (add_validator, validation_done, validators_have_run) are an addition:
//   they let the callbacks that read a stat by name tell a stat whose validation has not run yet
//   from a misspelt one.
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
  //
  //   trainer().monitors().put_scalar("val-error", err);
  void put_scalar(const std::string& name, double value);

  // Puts an image, or a batch of images. `image` is made NHWC:
  //   4-D         NHWC, unchanged
  //   3-D         HWC when the last dimension is 1, 3 or 4 (a batch of one), else NHW (grey)
  //   2-D         HW, one grey image
  // anything else throws std::invalid_argument("Monitors::put_image('<name>'): array of shape
  // [5] is not an image"). Values are cast to uint8 without clipping (numpy's astype('uint8'):
  // floats are truncated toward zero; out of range, integers and floats wrap modulo 256, which
  // numpy leaves undefined for floats; NaN and infinities give an unspecified byte), moved to
  // the CPU and made contiguous; every monitor's process_image gets that tensor. Then each
  // image is PNG-encoded (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA channels) into a summary, tagged
  // `name` for a single image and `name/<k>` for image k of a batch; an image that cannot be
  // encoded (another channel count, an empty image) is skipped with a warning. Every monitor's
  // process_summary gets the summary.
  //
  //   trainer().monitors().put_image("samples", generated);  // [16, 28, 28] -> name/0..15
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
  // do it themselves; a callback of your own that puts statistics at some epoch ends only should
  // too) declares itself at its setup_graph with add_validator(*this), and calls
  // validation_done(*this) after putting the statistics of each round:
  //
  //   void _setup_graph() override { trainer().monitors().add_validator(*this); }
  //   void _trigger() override {
  //     trainer().monitors().put_scalar("val-bleu", bleu());
  //     trainer().monitors().validation_done(*this);
  //   }
  //
  // The callbacks that read a stat by name (MinSaver/MaxSaver, EarlyStopping) take a name that
  // has no value once every validator has validated as misspelt (validators_have_run), and a
  // name with no value before that as a stat whose validation has not run yet. A callback is
  // identified by its address; adding one twice adds it once. validation_done of a callback that
  // was not added is std::invalid_argument naming it and add_validator.
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
// put_image's conversion, shared with MergeAllSummaries: `image` (HW, HWC, NHW or NHWC, any
// device, any real dtype) made NHWC, cast to uint8 without clipping, on the CPU and contiguous.
// Throws std::invalid_argument starting with `who` ("Monitors::put_image('x')") for an undefined
// tensor, a complex one or a shape that is not an image.
at::Tensor image_to_nhwc_uint8(const std::string& who, const at::Tensor& image);
// PNG-encodes image `k` of `nhwc_uint8` (as image_to_nhwc_uint8 returns it) into `*out`, a
// kImage value tagged `tag`. An image that cannot be encoded (another channel count, an empty
// image) logs a warning starting with `who` and returns false.
bool encode_image_value(const char* who, const at::Tensor& nhwc_uint8, int64_t k, std::string tag,
                        SummaryValue* out);
// put_summary's tag normalisation for scalars: removes every `tower[0-9]+/`, then one trailing
// `-summary`.
std::string normalize_summary_tag(const std::string& tag);
// The check that MinSaver/MaxSaver and EarlyStopping make of the name of the stat they read, at
// a trigger at `global_step` of epoch `epoch`: nullopt while `stat` has a value, or while some
// validator has not validated yet (Monitors::validators_have_run); otherwise what is wrong, for
// the caller to add what to do:
//   'val-eror' has not been put by global_step=6 (epoch 3), though every validation has run
//   (InferenceRunner). The stats put so far: cost, val-error.
// (without validators: `..., and no callback validates (none called Monitors::add_validator,
// as InferenceRunner does) to put it later.`; `none` when no stat was put).
std::optional<std::string> missing_stat_problem(const Monitors& monitors, const std::string& stat,
                                                int64_t global_step, int64_t epoch);
}  // namespace detail

}  // namespace trainpack
