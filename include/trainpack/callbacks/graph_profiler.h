// GraphProfiler (tensorpack's callbacks/prof.py): LibTorch's operator profiler around the hooked
// runs it sees, written as a Chrome trace, a TensorBoard table and/or an operator table file.
#pragma once

#include <cstdint>
#include <string>
#include <thread>

#include <torch/arg.h>

#include "trainpack/core/callback.h"

namespace trainpack {

struct GraphProfilerOptions {
  // Write `<logdir>/op-table-<global_step>.csv`: every operator of the step with its calls, self
  // and total time (in place of tensorpack's `runmetadata-<global_step>.pb`).
  TORCH_ARG(bool, dump_metadata) = false;
  // Write `<logdir>/chrome-trace-<global_step>.json` (chrome://tracing, Perfetto, speedscope).
  TORCH_ARG(bool, dump_tracing) = true;
  // Put a TensorBoard text summary `trace-<global_step>`: the most expensive operators, a table.
  TORCH_ARG(bool, dump_event) = false;
  // How many operators the dump_event table shows (the file of dump_metadata has them all).
  TORCH_ARG(int64_t, event_rows) = 20;
};

// tensorpack's GraphProfiler: profiles every hooked run it sees with LibTorch's profiler (the
// operators the training thread runs, with their input shapes) and writes what it recorded. Wrap
// it in EnableCallbackIf or PeriodicCallback for a window of steps.
// When: before_run starts the profiler, after_run stops it and writes, naming the files and tag
// after the global_step seen in after_run (the first step of a run is 1). after_train (also after
// a failed step) and the destructor discard a profiler still running.
// Writes (each atomically): `<logdir>/chrome-trace-<global_step>.json` (dump_tracing;
// utils/chrome_trace.h), `<logdir>/op-table-<global_step>.csv` (dump_metadata). Puts: a text
// summary `trace-<global_step>` (dump_event). Logs `[GraphProfiler] wrote <path> (open it in
// https://ui.perfetto.dev or chrome://tracing)` for the first trace of a run. chief_only: true.
// Errors: std::invalid_argument at construction when all three dump options are false or
// event_rows < 1, and at setup_graph without a logger directory. A run that finds LibTorch's
// profiler already on in its thread is not profiled (one warning).
// See docs/looking-inside.md, "Profiling a window of steps"; docs/tensorpack-differences.md #46.
class GraphProfiler : public Callback {
 public:
  explicit GraphProfiler(GraphProfilerOptions options = {});
  ~GraphProfiler() override;

  std::string name() const override { return "GraphProfiler"; }

  // Whether this callback's profiler is running (between a before_run and its after_run).
  bool profiling() const { return active_; }

 protected:
  void _setup_graph() override;
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;
  void _after_train() override;

 private:
  // Stops the profiler this callback started, if it is running, and forgets what it recorded.
  void discard() noexcept;

  GraphProfilerOptions options_;
  std::string dir_;
  bool active_ = false;
  std::thread::id profiled_thread_;
  bool warned_busy_ = false;
  bool told_where_ = false;
};

}  // namespace trainpack
