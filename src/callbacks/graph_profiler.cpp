#include "trainpack/callbacks/graph_profiler.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
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

// LibTorch's profiler with the Kineto state: without Kineto (Debian's LibTorch) it still records
// the operators through RecordFunction and returns them from disableProfiler(); only its own
// trace writer (ProfilerResult::save) needs Kineto. The legacy profiler would do too, but gives
// start/end marks to pair up rather than calls with a duration.
void start_profiler() {
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO, /*report_input_shapes=*/true);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
}

// A call's start and end in microseconds. LibTorch 1.x reports whole microseconds (startUs,
// durationUs); 2.x nanoseconds (startNs, endNs), floored here, which keeps nested calls nested.
template <class E>
auto start_end_us(const E& e, int) -> decltype(e.startNs(), std::pair<int64_t, int64_t>()) {
  return {static_cast<int64_t>(e.startNs() / 1000), static_cast<int64_t>(e.endNs() / 1000)};
}
template <class E>
std::pair<int64_t, int64_t> start_end_us(const E& e, long) {
  const auto start = static_cast<int64_t>(e.startUs());
  return {start, start + static_cast<int64_t>(e.durationUs())};
}
template <class R>
auto trace_start_us(const R& r, int) -> decltype(r.trace_start_ns(), int64_t()) {
  return static_cast<int64_t>(r.trace_start_ns() / 1000);
}
template <class R>
int64_t trace_start_us(const R& r, long) {
  return static_cast<int64_t>(r.trace_start_us());
}

// The calls the profiler recorded, timed from the start of the trace.
std::vector<TraceEvent> trace_events(const prof::ProfilerResult& result) {
  const auto& recorded = result.events();
  std::vector<std::pair<int64_t, int64_t>> times;
  times.reserve(recorded.size());
  int64_t origin = trace_start_us(result, 0);
  for (const auto& e : recorded) {
    times.push_back(start_end_us(e, 0));
    origin = std::min(origin, times.back().first);
  }
  std::vector<TraceEvent> events;
  events.reserve(recorded.size());
  for (size_t i = 0; i < recorded.size(); ++i) {
    const auto& e = recorded[i];
    TraceEvent event;
    event.name = e.name();
    event.category = e.deviceType() == c10::DeviceType::CPU ? "cpu_op" : "kernel";
    event.start_us = times[i].first - origin;
    event.duration_us = std::max<int64_t>(0, times[i].second - times[i].first);
    event.thread = e.startThreadId();
    if (e.hasShapes()) {
      for (const auto& shape : e.shapes()) event.input_shapes.push_back(shape);
    }
    if (e.hasTypes()) {
      for (const auto& type : e.dtypes()) event.input_types.push_back(type);
    }
    events.push_back(std::move(event));
  }
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
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  const int64_t step = global_step();
  const ChromeTrace trace(
      trace_events(*result),
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
      if (prof::profilerEnabled()) (void)prof::disableProfiler();
    } catch (const std::exception& e) {
      TP_LOG_WARN("[GraphProfiler] could not stop LibTorch's profiler: {}", e.what());
    }
  } catch (...) {  // a failing log line must not end the process from a destructor
  }
}

}  // namespace trainpack
