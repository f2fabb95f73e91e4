// GraphProfiler (tensorpack's callbacks/prof.py): LibTorch's operator profiler around the hooked
// runs it sees, written as a Chrome trace, a TensorBoard table and/or an operator table file.
//
// Public names: GraphProfilerOptions, GraphProfiler.
#pragma once

#include <cstdint>
#include <string>
#include <thread>

#include <torch/arg.h>

#include "trainpack/core/callback.h"

namespace trainpack {

struct GraphProfilerOptions {
  // Write `<logdir>/op-table-<global_step>.csv`: every operator of the step with its calls, self
  // and total time (LibTorch's stand-in for tensorpack's `runmetadata-<global_step>.pb`).
  TORCH_ARG(bool, dump_metadata) = false;
  // Write `<logdir>/chrome-trace-<global_step>.json` (chrome://tracing, Perfetto, speedscope).
  TORCH_ARG(bool, dump_tracing) = true;
  // Put a TensorBoard text summary `trace-<global_step>`: the step's most expensive operators as a
  // Markdown table.
  TORCH_ARG(bool, dump_event) = false;
  // How many operators the dump_event table shows (the file of dump_metadata has them all).
  TORCH_ARG(int64_t, event_rows) = 20;
};

// Profiles every hooked run it sees with LibTorch's profiler (the operators the training thread
// runs, with their input shapes) and writes what it recorded. Wrap it for a window of steps:
//
//   // global steps 101..105 (the files are chrome-trace-101.json ... chrome-trace-105.json)
//   callbacks.push_back(std::make_shared<EnableCallbackIf>(
//       std::make_shared<GraphProfiler>(),
//       [](const EnableCallbackIf& self) {
//         return self.global_step() >= 100 && self.global_step() < 105;  // before the increment
//       }));
//   // every 1000th step
//   callbacks.push_back(std::make_shared<PeriodicCallback>(
//       std::make_shared<GraphProfiler>(GraphProfilerOptions().dump_event(true)),
//       PeriodicCallbackOptions().every_k_steps(1000)));
//
// When: before_run starts the profiler, after_run stops it and writes (so the trace holds the
// step and the hooks of the callbacks after this one in before_run and before it in after_run).
// The files and the tag are named after the global_step seen in after_run, which counts the step
// just run (the first step of a run is 1). after_train (also after a failed step, whose after_run
// never came) and the destructor stop a profiler still running, discarding what it recorded.
// Writes: `<logdir>/chrome-trace-<global_step>.json` (dump_tracing; the format is described in
// trainpack/utils/chrome_trace.h), `<logdir>/op-table-<global_step>.csv` (dump_metadata), each
// replaced atomically.
// Puts: a text summary tagged `trace-<global_step>` (dump_event).
// Logs: `[GraphProfiler] wrote <path> (open it in https://ui.perfetto.dev or chrome://tracing)`,
// for the first trace of a run only.
// chief_only: true.
// Errors: std::invalid_argument at construction when all three dump options are false (nothing
// would be written) or event_rows < 1; at setup_graph when the logger directory is not set
// (`GraphProfiler: the logger directory is not set; call trainpack::logger::set_logger_dir(dir)
// first`). A run that finds LibTorch's profiler already on in its thread (the user's own) is not
// profiled, with one warning.
//
// Differences from tensorpack: LibTorch's profiler records operators on the thread that starts it
// (the training thread, including autograd's backward on CPU), not every device and stream of a
// TensorFlow session; tensorpack's RunMetadata protobuf has no LibTorch counterpart, so
// dump_metadata writes the operator table as CSV instead; the TensorBoard event is a text summary
// (a table), not TensorFlow's RunMetadata event (TensorBoard's graph view has no eager graph to
// show it on). The Chrome trace is written by trainpack: Debian's LibTorch has no Kineto, whose
// own writer (ProfilerResult::save) it would otherwise use, and its Kineto-mode events carry whole
// microseconds only, so the profiler runs in its legacy mode, whose events carry nanoseconds (and
// input shapes, but not input types).
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
