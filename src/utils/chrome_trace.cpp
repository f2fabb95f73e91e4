#include "trainpack/utils/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace trainpack {

namespace {
constexpr size_t kNoParent = std::numeric_limits<size_t>::max();

// Nanoseconds as microseconds, the unit of the format. A JSON number written from a double: the
// shortest text that reads back as the same double, so 8381234 ns is 8381.234 (and 5000 ns 5.0).
double microseconds(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// Nanoseconds as microseconds with three decimals, exactly ("1295.412", "-0.005").
std::string exact_microseconds(int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  const uint64_t magnitude = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  return fmt::format("{}{}.{:03}", sign, magnitude / 1000, magnitude % 1000);
}
}  // namespace

ChromeTrace::ChromeTrace(std::vector<TraceEvent> events, ChromeTraceOptions options)
    : events_(std::move(events)), options_(std::move(options)) {
  for (const TraceEvent& e : events_) {
    if (e.start_ns < 0 || e.duration_ns < 0) {
      throw std::invalid_argument(
          fmt::format("ChromeTrace: event '{}' has a negative start ({} ns) or duration ({} ns)",
                      e.name, e.start_ns, e.duration_ns));
    }
  }
  // Threads numbered in the order their first call started (ties: the smaller id first).
  std::unordered_map<uint64_t, int64_t> first_start;
  for (const TraceEvent& e : events_) {
    auto [it, inserted] = first_start.emplace(e.thread, e.start_ns);
    if (!inserted) it->second = std::min(it->second, e.start_ns);
  }
  std::vector<std::pair<int64_t, uint64_t>> order;
  order.reserve(first_start.size());
  for (const auto& [thread, start] : first_start) order.emplace_back(start, thread);
  std::sort(order.begin(), order.end());
  std::unordered_map<uint64_t, int> tid_of;
  for (size_t i = 0; i < order.size(); ++i) {
    tids_.emplace_back(order[i].second, static_cast<int>(i + 1));
    tid_of[order[i].second] = static_cast<int>(i + 1);
  }
  // By thread, then start; of two calls starting together the longer encloses the other (the
  // profiler's own order breaks the remaining ties: a parent is recorded before its children).
  std::stable_sort(events_.begin(), events_.end(), [&](const TraceEvent& a, const TraceEvent& b) {
    const int ta = tid_of[a.thread], tb = tid_of[b.thread];
    if (ta != tb) return ta < tb;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.duration_ns > b.duration_ns;
  });
  // Nesting: a stack of the calls still open on the thread; a call that starts inside the top one
  // and would end after it is cut at its end (a rounding of the profiler's times).
  parent_.assign(events_.size(), kNoParent);
  std::vector<size_t> open;
  for (size_t i = 0; i < events_.size(); ++i) {
    TraceEvent& e = events_[i];
    if (i > 0 && events_[i - 1].thread != e.thread) open.clear();
    while (!open.empty()) {
      const TraceEvent& top = events_[open.back()];
      if (top.start_ns + top.duration_ns > e.start_ns) break;
      open.pop_back();
    }
    if (!open.empty()) {
      const TraceEvent& top = events_[open.back()];
      const int64_t top_end = top.start_ns + top.duration_ns;
      if (e.start_ns + e.duration_ns > top_end) e.duration_ns = top_end - e.start_ns;
      parent_[i] = open.back();
    }
    open.push_back(i);
  }
}

int ChromeTrace::tid(uint64_t thread) const {
  for (const auto& [id, tid] : tids_) {
    if (id == thread) return tid;
  }
  return 0;
}

std::string ChromeTrace::json() const {
  using Json = nlohmann::ordered_json;
  constexpr int kPid = 1;
  Json trace_events = Json::array();
  trace_events.push_back({{"name", "process_name"},
                          {"ph", "M"},
                          {"pid", kPid},
                          {"tid", 0},
                          {"args", {{"name", options_.process_name()}}}});
  for (const auto& [thread, tid] : tids_) {
    const auto named = options_.thread_names().find(thread);
    trace_events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", kPid},
         {"tid", tid},
         {"args",
          {{"name", named != options_.thread_names().end() ? named->second
                                                           : fmt::format("thread {}", thread)}}}});
  }
  std::unordered_map<uint64_t, int> tid_of(tids_.begin(), tids_.end());
  for (const TraceEvent& e : events_) {
    Json args = Json::object();
    if (!e.input_shapes.empty()) args["Input Dims"] = e.input_shapes;
    if (!e.input_types.empty()) args["Input type"] = e.input_types;
    trace_events.push_back({{"name", e.name},
                            {"cat", e.category},
                            {"ph", "X"},
                            {"ts", microseconds(e.start_ns)},
                            {"dur", microseconds(e.duration_ns)},
                            {"pid", kPid},
                            {"tid", tid_of[e.thread]},
                            {"args", std::move(args)}});
  }
  Json doc = {{"traceEvents", std::move(trace_events)}, {"displayTimeUnit", "ms"}};
  if (!options_.other_data().empty()) doc["otherData"] = options_.other_data();
  // Operator names come from C++ code, but a malformed UTF-8 byte must not lose the trace.
  return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::vector<OperatorStats> ChromeTrace::operator_table() const {
  std::vector<int64_t> self(events_.size());
  for (size_t i = 0; i < events_.size(); ++i) self[i] = events_[i].duration_ns;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (parent_[i] != kNoParent) self[parent_[i]] -= events_[i].duration_ns;
  }
  std::unordered_map<std::string, size_t> row_of;
  std::vector<OperatorStats> table;
  for (size_t i = 0; i < events_.size(); ++i) {
    auto [it, inserted] = row_of.emplace(events_[i].name, table.size());
    if (inserted) table.push_back(OperatorStats{events_[i].name, 0, 0, 0});
    OperatorStats& row = table[it->second];
    row.calls += 1;
    row.self_ns += self[i];
    row.total_ns += events_[i].duration_ns;
  }
  std::sort(table.begin(), table.end(), [](const OperatorStats& a, const OperatorStats& b) {
    if (a.self_ns != b.self_ns) return a.self_ns > b.self_ns;
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.name < b.name;
  });
  return table;
}

std::string operator_table_markdown(const std::vector<OperatorStats>& table, size_t max_rows) {
  int64_t all_self = 0;
  for (const OperatorStats& row : table) all_self += row.self_ns;
  const auto percent = [&](int64_t ns) {
    return all_self > 0 ? 100.0 * static_cast<double>(ns) / static_cast<double>(all_self) : 0.0;
  };
  std::string out =
      "| Operator | Calls | Self (us) | Self % | Total (us) |\n"
      "|:--|--:|--:|--:|--:|\n";
  const size_t shown = std::min(max_rows, table.size());
  for (size_t i = 0; i < shown; ++i) {
    const OperatorStats& row = table[i];
    std::string name;
    for (char c : row.name) {
      if (c == '|') name += '\\';
      name += (c == '\n' || c == '\r') ? ' ' : c;
    }
    out += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} |\n", name, row.calls,
                       microseconds(row.self_ns), percent(row.self_ns), microseconds(row.total_ns));
  }
  if (shown < table.size()) {
    int64_t rest = 0;
    for (size_t i = shown; i < table.size(); ++i) rest += table[i].self_ns;
    out += fmt::format("\n{} more operators: {:.1f} us of self time ({:.1f}%).\n",
                       table.size() - shown, microseconds(rest), percent(rest));
  }
  return out;
}

std::string operator_table_csv(const std::vector<OperatorStats>& table) {
  std::string out = "operator,calls,self_us,total_us\n";
  for (const OperatorStats& row : table) {
    if (row.name.find_first_of(",\"\r\n") == std::string::npos) {
      out += row.name;
    } else {
      out += '"';
      for (char c : row.name) {
        if (c == '"') out += '"';
        out += c;
      }
      out += '"';
    }
    out += fmt::format(",{},{},{}\n", row.calls, exact_microseconds(row.self_ns),
                       exact_microseconds(row.total_ns));
  }
  return out;
}

}  // namespace trainpack
