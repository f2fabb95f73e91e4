// Monitors: where training statistics go. `trainer.monitors().put_scalar("cost", 0.3)` hands a
// value to every monitor (each one decides when to write or print it) and records it in the
// history that `get_history` / `get_latest` read (StatMonitorParamSetter, MinSaver, ...).
//
// A monitor is a MonitorBase: a callback (so it gets every lifecycle hook) that also receives
// the processed data. Monitors are passed to the trainer separately from callbacks; a monitor in
// the callback list is an error. The monitors themselves (TFEventWriter, JSONWriter,
// ScalarPrinter, ...) are in `trainpack/callbacks/monitor.h`, which includes this file.
//
// Differences from tensorpack: scalars are doubles (stats.json prints them as Python floats).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainpack/callbacks/base.h"
#include "trainpack/utils/summary.h"

namespace trainpack {

class MonitorBase : public Callback {
 public:
  MonitorBase() {
    set_chief_only_flag(false);
    enter_name_scope_ = false;
  }
  // Called for every scalar put to the monitors, in put order (also for each scalar of a
  // summary given to put_summary, after tag normalisation).
  virtual void process_scalar(const std::string& /*name*/, double /*value*/) {}
  // Called by put_image with the image as an NHWC uint8 tensor on the CPU.
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

// The aggregator: `trainer.monitors()`. Registered as the last callback.
class Monitors : public Callback {
 public:
  using History = std::vector<std::pair<int64_t, double>>;  // (global_step at put time, value)

  explicit Monitors(std::vector<MonitorPtr> monitors);

  // Dispatches (name, value) to every monitor's process_scalar, then records it with the
  // current global step.
  void put_scalar(const std::string& name, double value);

  // Every (global_step, value) put under `name`, in put order; empty for an unknown name.
  const History& get_history(const std::string& name) const;
  // The last value put under `name`. Throws std::out_of_range
  // ("No available data for the key: <name>") when there is none.
  double get_latest(const std::string& name) const;

  const std::vector<MonitorPtr>& monitors() const { return monitors_; }

 private:
  std::vector<MonitorPtr> monitors_;
  std::map<std::string, History> history_;
};

}  // namespace trainpack
