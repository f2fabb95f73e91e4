#include "trainpack/callbacks/graph_profiler.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
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
// With a GPU, the CUDA mode: every push and pop also records a CUDA event on the current stream,
// so each call's span on the GPU is known too (the events are read when the profiler stops: one
// host sync, on the profiled step only).
void start_profiler() {
  const bool cuda = torch::cuda::is_available();
  prof::enableProfilerLegacy(prof::ProfilerConfig(
      cuda ? prof::ProfilerState::CUDA : prof::ProfilerState::CPU, /*report_input_shapes=*/true));
}

// The trace's thread id of a device's CUDA events: far from the profiler's thread ids (small
// counters), and named in the trace ("cuda:0 (CUDA events)").
constexpr uint64_t kCudaEventsThread = 0xC0DA0000ULL;

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
  // The GPU side (ProfilerState::CUDA): each call whose push and pop carry CUDA events spans,
  // on its device, the time between them; the device's start mark, recorded with both clocks when
  // the profiler started, puts that span on the CPU's time line.
  std::unordered_map<int64_t, const prof::LegacyEvent*> start_marks;
  for (const auto& list : lists) {
    for (const auto& e : list) {
      if (e.kind() == prof::EventKind::Mark && e.hasCuda() &&
          std::string(e.name()) == "__cuda_start_event") {
        start_marks.emplace(static_cast<int64_t>(e.device()), &e);
      }
    }
  }
  if (!start_marks.empty()) {
    for (const auto& list : lists) {
      for (const auto& pop : list) {
        if (pop.kind() != prof::EventKind::PopRange || !pop.hasCuda()) continue;
        const auto push = pushed.find(pop.handle());
        if (push == pushed.end() || !push->second->hasCuda()) continue;
        const prof::LegacyEvent& e = *push->second;
        const auto mark = start_marks.find(static_cast<int64_t>(e.device()));
        if (mark == start_marks.end()) continue;
        TraceEvent event;
        event.name = e.name();
        event.category = "cuda_event";
        event.start_ns =
            since_reference(*mark->second) +
            static_cast<int64_t>(std::llround(mark->second->cudaElapsedUs(e) * 1000.0));
        event.duration_ns =
            std::max<int64_t>(0, static_cast<int64_t>(std::llround(e.cudaElapsedUs(pop) * 1000.0)));
        event.thread = kCudaEventsThread + static_cast<uint64_t>(e.device());
        origin = std::min(origin, event.start_ns);
        events.push_back(std::move(event));
      }
    }
  }
  for (auto& event : events) event.start_ns -= origin;
  return events;
}

// The names of the trace's threads: the training thread, and each device whose CUDA events it
// holds.
TraceThreadNames thread_names(const std::vector<TraceEvent>& events) {
  TraceThreadNames names{{at::RecordFunction::currentThreadId(), "training thread"}};
  for (const auto& e : events) {
    if (e.category == "cuda_event" && names.find(e.thread) == names.end()) {
      names.emplace(e.thread, fmt::format("cuda:{} (CUDA events)", e.thread - kCudaEventsThread));
    }
  }
  return names;
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
  std::vector<TraceEvent> events = trace_events(recorded);
  TraceThreadNames names = thread_names(events);
  const ChromeTrace trace(events, ChromeTraceOptions()
                                      .process_name(fmt::format("trainpack (pid {})", ::getpid()))
                                      .thread_names(names)
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
    // The operators' table counts the calls of the CPU: a call's CUDA span is the same call.
    events.erase(std::remove_if(events.begin(), events.end(),
                                [](const TraceEvent& e) { return e.category == "cuda_event"; }),
                 events.end());
    const std::vector<OperatorStats> table =
        ChromeTrace(std::move(events), ChromeTraceOptions()).operator_table();
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
