// Chrome's Trace Event Format (the JSON that chrome://tracing, Perfetto and speedscope open), and
// the table of the most expensive operators, made from the operator calls a profiler recorded.
// GraphProfiler (callbacks/graph_profiler.h) uses it; it knows nothing of LibTorch, so a test or
// another profiler can use it too.
//
// json() writes `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`: a
// metadata event naming the process and one per thread, then one complete event ("ph": "X") per
// call, with ts and dur in microseconds with the nanoseconds as decimals, pid 1, tid 1, 2, ...
// (threads in the order their first call started), and the input shapes and types in "args"
// when recorded. Each thread's events are in start order and properly nested: a call that ends
// after its parent is cut at the parent's end. Why, and an example: docs/architecture.md, "The
// Chrome trace".
#pragma once

#include <torch/arg.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainpack {

// One operator call, as a profiler reports it.
struct TraceEvent {
  std::string name;
  std::string category = "cpu_op";
  int64_t start_ns = 0;  // nanoseconds from the start of the trace (or any origin at or before)
  int64_t duration_ns = 0;
  uint64_t thread = 0;                             // the profiler's id of the thread that ran it
  std::vector<std::vector<int64_t>> input_shapes;  // one per input; empty: none recorded
  std::vector<std::string> input_types;            // one per input; empty: none recorded
};

// An operator's line in the table: how often it ran, the time spent in it excluding the operators
// it called (self), and including them (total). Like PyTorch's key_averages(), an operator that
// calls itself (aten::sum inside aten::sum) counts both calls in total.
struct OperatorStats {
  std::string name;
  int64_t calls = 0;
  int64_t self_ns = 0;
  int64_t total_ns = 0;
};

// Profiler thread id -> the name the viewer shows; "otherData" key -> value.
using TraceThreadNames = std::map<uint64_t, std::string>;
using TraceOtherData = std::map<std::string, int64_t>;

struct ChromeTraceOptions {
  // The name of the process in the viewer.
  TORCH_ARG(std::string, process_name) = "trainpack";
  // Names for some of the profiler's thread ids; the others are called "thread <id>".
  TORCH_ARG(TraceThreadNames, thread_names);
  // Numbers the whole trace carries in "otherData" (e.g. the global step).
  TORCH_ARG(TraceOtherData, other_data);
};

class ChromeTrace {
 public:
  // Sorts and nests the events (see the top of this file). Negative times or durations are
  // std::invalid_argument naming the event.
  explicit ChromeTrace(std::vector<TraceEvent> events, ChromeTraceOptions options = {});

  // The events as json() writes them: by thread (in tid order), then by start; nested.
  const std::vector<TraceEvent>& events() const { return events_; }
  // The small tid json() gives a profiler thread id (1, 2, ...); 0 for a thread without events.
  int tid(uint64_t thread) const;

  // The trace as Trace Event Format JSON (see the top of this file).
  std::string json() const;

  // One line per operator name, the most expensive first (by self time, then total time, then
  // name).
  std::vector<OperatorStats> operator_table() const;

 private:
  std::vector<TraceEvent> events_;
  std::vector<size_t> parent_;                  // index of the enclosing call in events_, or npos
  std::vector<std::pair<uint64_t, int>> tids_;  // (profiler thread id, tid), in tid order
  ChromeTraceOptions options_;
};

// The table in Markdown (TensorBoard's text plugin draws it): a header
// (`| Operator | Calls | Self (us) | Self % | Total (us) |`), then at most `max_rows` operators,
// then, when some were left out, a line saying how many and their self time. Times in
// microseconds with one decimal; Self % is of the sum of all operators' self times. A `|` in a
// name is escaped.
std::string operator_table_markdown(const std::vector<OperatorStats>& table, size_t max_rows);

// The whole table as CSV (RFC 4180 quoting), `operator,calls,self_us,total_us`, times in
// microseconds with the nanoseconds as decimals.
std::string operator_table_csv(const std::vector<OperatorStats>& table);

}  // namespace trainpack
