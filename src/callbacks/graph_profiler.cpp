#include "trainpack/callbacks/graph_profiler.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainpack/callbacks/monitor_base.h"
#include "trainpack/train/trainer.h"
#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/chrome_trace.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/output_dir.h"
#include "trainpack/utils/summary.h"

namespace trainpack {

namespace {

namespace prof = torch::autograd::profiler;

// LibTorch's profiler in its legacy mode: each operator call as a push and a pop event with
// nanosecond times (the Kineto mode of Debian's LibTorch 1.13, which has no Kineto, records the
// same calls but reports whole microseconds, which makes most short operators last 0 us; see
// utils/chrome_trace.h for why that matters to viewers). Both modes collect through
// RecordFunction on the thread that enables them, and what it hands to at::launch tasks and
// autograd's engine.
void start_profiler() {
  prof::enableProfilerLegacy(
      prof::ProfilerConfig(prof::ProfilerState::CPU, /*report_input_shapes=*/true));
}

// The calls of the recorded push/pop pairs (matched by their RecordFunction handle; a call not
// finished is left out), timed in nanoseconds from the earliest event.
std::vector<TraceEvent> trace_events(const prof::thread_event_lists& lists) {
  const prof::LegacyEvent* reference = nullptr;
  for (const auto& list : lists) {
    if (!list.empty()) {
      reference = &list.front();
      break;
    }
  }
  if (reference == nullptr) return {};
  // Differences of the events' own nanosecond counters (cpuUs() is the absolute time as a
  // double, which keeps about a quarter of a microsecond).
  const auto since_reference = [&](const prof::LegacyEvent& e) {
    return static_cast<int64_t>(std::llround(reference->cpuElapsedUs(e) * 1000.0));
  };
  std::unordered_map<uint64_t, const prof::LegacyEvent*> pushed;
  for (const auto& list : lists) {
    for (const auto& e : list) {
      if (e.kind() == prof::EventKind::PushRange) pushed.emplace(e.handle(), &e);
    }
  }
  std::vector<TraceEvent> events;
  int64_t origin = 0;
  for (const auto& list : lists) {
    for (const auto& pop : list) {
      if (pop.kind() != prof::EventKind::PopRange) continue;
      const auto push = pushed.find(pop.handle());
      if (push == pushed.end()) continue;
      const prof::LegacyEvent& e = *push->second;
      TraceEvent event;
      event.name = e.name();
      event.start_ns = since_reference(e);
      event.duration_ns = std::max<int64_t>(0, since_reference(pop) - event.start_ns);
      event.thread = e.threadId();
      event.input_shapes = e.shapes();
      origin = std::min(origin, event.start_ns);
      events.push_back(std::move(event));
    }
  }
  for (auto& event : events) event.start_ns -= origin;
  return events;
}

std::string join_path(const std::string& dir, const std::string& name) {
  return !dir.empty() && dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

GraphProfiler::GraphProfiler(GraphProfilerOptions options) : options_(options) {
  if (!options_.dump_metadata() && !options_.dump_tracing() && !options_.dump_event()) {
    throw std::invalid_argument(
        "GraphProfiler: dump_metadata, dump_tracing and dump_event are all false, so nothing "
        "would be written; set at least one (GraphProfilerOptions().dump_tracing(true))");
  }
  if (options_.event_rows() < 1) {
    throw std::invalid_argument(
        fmt::format("GraphProfiler: event_rows must be at least 1, got {}", options_.event_rows()));
  }
}

GraphProfiler::~GraphProfiler() { discard(); }

void GraphProfiler::_setup_graph() { dir_ = resolve_output_dir(std::nullopt, "GraphProfiler", ""); }

RunArgs GraphProfiler::_before_run(const StepContext& /*ctx*/) {
  discard();  // a run that never reached after_run (defensive: the trainer stops on a failure)
  if (prof::profilerEnabled()) {
    if (!warned_busy_) {
      TP_LOG_WARN(
          "[GraphProfiler] LibTorch's profiler is already running in the training thread (started "
          "by other code); GraphProfiler does not profile while it is.");
      warned_busy_ = true;
    }
    return RunArgs();
  }
  start_profiler();
  active_ = true;
  profiled_thread_ = std::this_thread::get_id();
  return RunArgs();
}

void GraphProfiler::_after_run(const StepContext& /*ctx*/, const RunValues& /*values*/) {
  if (!active_) return;
  active_ = false;
  const prof::thread_event_lists recorded = prof::disableProfilerLegacy();
  const int64_t step = global_step();
  const ChromeTrace trace(
      trace_events(recorded),
      ChromeTraceOptions()
          .process_name(fmt::format("trainpack (pid {})", ::getpid()))
          .thread_names({{at::RecordFunction::currentThreadId(), "training thread"}})
          .other_data({{"global_step", step}}));
  if (options_.dump_tracing()) {
    const std::string path = join_path(dir_, fmt::format("chrome-trace-{}.json", step));
    write_file_atomically(path, trace.json());
    if (!told_where_) {
      TP_LOG_INFO(
          "[GraphProfiler] wrote {} (open it in https://ui.perfetto.dev or chrome://tracing)",
          path);
      told_where_ = true;
    }
  }
  if (options_.dump_metadata() || options_.dump_event()) {
    const std::vector<OperatorStats> table = trace.operator_table();
    if (options_.dump_metadata()) {
      write_file_atomically(join_path(dir_, fmt::format("op-table-{}.csv", step)),
                            operator_table_csv(table));
    }
    if (options_.dump_event()) {
      Summary summary;
      summary.values.push_back(SummaryValue::make_text(
          fmt::format("trace-{}", step),
          fmt::format("Operators of global_step {}, by self time:\n\n{}", step,
                      operator_table_markdown(table, static_cast<size_t>(options_.event_rows())))));
      trainer().monitors().put_summary(std::move(summary));
    }
  }
}

void GraphProfiler::_after_train() { discard(); }

void GraphProfiler::discard() noexcept {
  if (!active_) return;
  active_ = false;
  // The profiler is per thread: only the thread that started it can stop it.
  if (profiled_thread_ != std::this_thread::get_id()) return;
  try {
    try {
      if (prof::profilerEnabled()) (void)prof::disableProfilerLegacy();
    } catch (const std::exception& e) {
      TP_LOG_WARN("[GraphProfiler] could not stop LibTorch's profiler: {}", e.what());
    }
  } catch (...) {  // a failing log line must not end the process from a destructor
  }
}

}  // namespace trainpack
