// Test support: a strict check of Chrome's Trace Event Format, as far as trainpack's traces use it
// (complete "X" events and "M" metadata events), written from the format's public description
// ("Trace Event Format", Google, the document chrome://tracing and Perfetto follow) and from what
// Perfetto's importer rejects, not from trainpack's writer:
// - the file is a JSON object whose "traceEvents" is an array of objects; "displayTimeUnit", when
//   present, is "ms" or "ns";
// - every event has a string "ph"; only "X" and "M" are expected;
// - an "X" event has a string "name", a string "cat", numbers "ts" and "dur" >= 0 (microseconds,
//   compared below as whole nanoseconds, as Perfetto reads them), integer "pid" and "tid" that fit
//   32 bits (Perfetto drops larger tids), and "args", if present, is an object;
// - an "M" event is "process_name" or "thread_name" with integer pid/tid and a string args.name;
//   every pid of an "X" event has a process_name, every (pid, tid) a thread_name;
// - per (pid, tid), in file order: "ts" never decreases, and the events nest (an event that starts
//   before the enclosing one ends also ends no later than it).
// trace_event_format_problems returns what is wrong (empty: valid), at most `max_problems`.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace trainpack {
namespace testing {

inline std::vector<std::string> trace_event_format_problems(const std::string& text,
                                                            size_t max_problems = 20) {
  using Json = nlohmann::json;
  std::vector<std::string> problems;
  auto fail = [&](std::string p) {
    if (problems.size() < max_problems) problems.push_back(std::move(p));
  };
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const std::exception& e) {
    return {std::string("not JSON: ") + e.what()};
  }
  if (!doc.is_object()) return {"the top level is not an object"};
  if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return {"no \"traceEvents\" array"};
  }
  if (doc.contains("displayTimeUnit")) {
    const Json& unit = doc["displayTimeUnit"];
    if (!unit.is_string() || (unit != "ms" && unit != "ns")) {
      fail("displayTimeUnit is not \"ms\" or \"ns\": " + unit.dump());
    }
  }
  const auto is_int32 = [](const Json& v) {
    if (!v.is_number_integer()) return false;
    const int64_t x = v.get<int64_t>();
    return x >= std::numeric_limits<int32_t>::min() && x <= std::numeric_limits<int32_t>::max();
  };
  const auto is_time = [](const Json& v) {
    return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0 &&
           v.get<double>() < 1e15;
  };
  const auto nanoseconds = [](const Json& v) {
    return static_cast<int64_t>(std::llround(v.get<double>() * 1000.0));
  };
  std::set<int64_t> named_pids, used_pids;
  std::set<std::pair<int64_t, int64_t>> named_threads, used_threads;
  // Per thread: the last start, and the ends of the events still open.
  std::map<std::pair<int64_t, int64_t>, std::pair<int64_t, std::vector<int64_t>>> threads;
  size_t index = 0;
  for (const Json& e : doc["traceEvents"]) {
    const std::string where = fmt::format("event {}", index++);
    if (!e.is_object()) {
      fail(where + " is not an object");
      continue;
    }
    if (!e.contains("ph") || !e["ph"].is_string()) {
      fail(where + " has no string \"ph\": " + e.dump());
      continue;
    }
    const std::string ph = e["ph"];
    bool ids_ok = true;
    for (const char* key : {"pid", "tid"}) {
      if (!e.contains(key) || !is_int32(e[key])) {
        fail(fmt::format("{} has no \"{}\" that is an integer fitting 32 bits: {}", where, key,
                         e.dump()));
        ids_ok = false;
      }
    }
    if (!ids_ok) continue;
    const int64_t pid = e["pid"], tid = e["tid"];
    if (ph == "M") {
      const bool named = e.contains("args") && e["args"].is_object() &&
                         e["args"].contains("name") && e["args"]["name"].is_string();
      if (!e.contains("name") || !named) {
        fail(where + " is metadata without a name and a string args.name: " + e.dump());
        continue;
      }
      if (e["name"] == "process_name") {
        named_pids.insert(pid);
      } else if (e["name"] == "thread_name") {
        named_threads.insert({pid, tid});
      } else {
        fail(where + " is metadata other than process_name/thread_name: " + e.dump());
      }
      continue;
    }
    if (ph != "X") {
      fail(where + " has phase \"" + ph + "\"; only X and M are expected");
      continue;
    }
    bool ok = true;
    for (const char* key : {"name", "cat"}) {
      if (!e.contains(key) || !e[key].is_string()) {
        fail(fmt::format("{} has no string \"{}\": {}", where, key, e.dump()));
        ok = false;
      }
    }
    for (const char* key : {"ts", "dur"}) {
      if (!e.contains(key) || !is_time(e[key])) {
        fail(fmt::format("{} has no \"{}\" that is a number >= 0: {}", where, key, e.dump()));
        ok = false;
      }
    }
    if (e.contains("args") && !e["args"].is_object()) {
      fail(where + " has \"args\" that is not an object");
      ok = false;
    }
    if (!ok) continue;
    used_pids.insert(pid);
    used_threads.insert({pid, tid});
    const int64_t ts = nanoseconds(e["ts"]), end = ts + nanoseconds(e["dur"]);
    auto [it, first] = threads.try_emplace({pid, tid}, ts, std::vector<int64_t>{});
    auto& [last_ts, open] = it->second;
    if (!first && ts < last_ts) {
      fail(fmt::format("{} ({}) starts at {} ns, before the previous event of tid {} ({} ns)",
                       where, e["name"].get<std::string>(), ts, tid, last_ts));
    }
    last_ts = ts;
    while (!open.empty() && open.back() <= ts) open.pop_back();
    if (!open.empty() && end > open.back()) {
      fail(fmt::format(
          "{} ({}) spans {}..{} ns and overlaps the end of its enclosing event at {} ns", where,
          e["name"].get<std::string>(), ts, end, open.back()));
    }
    open.push_back(end);
  }
  for (int64_t pid : used_pids) {
    if (!named_pids.count(pid)) fail(fmt::format("pid {} has no process_name", pid));
  }
  for (const auto& [pid, tid] : used_threads) {
    if (!named_threads.count({pid, tid})) {
      fail(fmt::format("pid {} tid {} has no thread_name", pid, tid));
    }
  }
  return problems;
}

}  // namespace testing
}  // namespace trainpack
