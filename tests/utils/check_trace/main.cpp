// trainpack_check_trace: the strict Trace Event Format check of tests/support/trace_event_format.h
// as a program, for the tests of the example programs' traces.
//
//   trainpack_check_trace [--expect NAME]... FILE...
//
// For each file: the format's problems, and every NAME that no complete event has. Prints one line
// per file ("FILE: 433 events on 1 thread(s)") and the problems; exit status 1 when any file has
// one, 2 for bad usage.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "support/files.h"
#include "support/trace_event_format.h"

int main(int argc, char** argv) {
  std::vector<std::string> expected, files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--expect" && i + 1 < argc) {
      expected.emplace_back(argv[++i]);
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "usage: trainpack_check_trace [--expect NAME]... FILE...\n");
      return 2;
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: trainpack_check_trace [--expect NAME]... FILE...\n");
    return 2;
  }
  bool ok = true;
  for (const std::string& file : files) {
    const std::string text = trainpack::testing::read_text(file);
    std::vector<std::string> problems = trainpack::testing::trace_event_format_problems(text);
    size_t events = 0;
    std::set<std::pair<int64_t, int64_t>> threads;
    if (problems.empty()) {
      std::set<std::string> names;
      const nlohmann::json doc = nlohmann::json::parse(text);
      for (const auto& e : doc["traceEvents"]) {
        if (e["ph"] != "X") continue;
        ++events;
        names.insert(e["name"].get<std::string>());
        threads.emplace(e["pid"].get<int64_t>(), e["tid"].get<int64_t>());
      }
      for (const std::string& name : expected) {
        if (!names.count(name)) problems.push_back("no event is named " + name);
      }
      if (events == 0) problems.push_back("no complete event");
    }
    std::printf("%s: %zu events on %zu thread(s)%s\n", file.c_str(), events, threads.size(),
                problems.empty() ? "" : ":");
    for (const std::string& p : problems) std::printf("  %s\n", p.c_str());
    ok = ok && problems.empty();
  }
  return ok ? 0 : 1;
}
