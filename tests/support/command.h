// Test support: running a shell command and reading what it prints.
#pragma once

#include <stdio.h>

#include <string>
#include <utility>

namespace trainpack {
namespace testing {

// Runs `cmd` with the shell (popen); returns its stdout and its wait status as pclose gives it
// ({"", -1} when it cannot be started).
inline std::pair<std::string, int> run_command(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {"", -1};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return {out, ::pclose(p)};
}

}  // namespace testing
}  // namespace trainpack
