// Small helpers shared by the benchmark programs: the median of timings, the `--reps R --dir DIR`
// command line of the file-writing benchmarks, a positive integer argument, and scratch and logger
// directories.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "trainpack/utils/logger.h"

namespace trainpack::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The value of `flag`, `text`, as a positive integer; prints why and exits with 2 when it is not.
inline int64_t parse_positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "%s: expected a positive integer, got '%s'\n", flag, text);
    std::exit(2);
  }
  return static_cast<int64_t>(v);
}

struct RepsAndDir {
  int reps;
  std::string dir = ".";  // where the scratch directory goes: the disk being measured
};

// Parses `[--reps R] [--dir DIR]`; prints the usage and exits with 2 on anything else.
inline RepsAndDir parse_reps_and_dir(int argc, char** argv, int default_reps) {
  RepsAndDir out{default_reps};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      out.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--dir" && i + 1 < argc) {
      out.dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--reps R (%d)] [--dir DIR (.)]\n", argv[0], default_reps);
      std::exit(2);
    }
  }
  return out;
}

// A new directory `<base>/<name>.XXXXXX`; exits with 1 when it cannot be made.
inline std::filesystem::path make_scratch_dir(const std::string& base, const std::string& name) {
  std::string tmpl = (std::filesystem::path(base) / (name + ".XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "cannot create a directory under %s\n", base.c_str());
    std::exit(1);
  }
  return tmpl;
}

// A fresh logger directory under /tmp for one trainer run (the default monitors write real files
// there), unset and removed at the end of the scope.
class ScratchLoggerDir {
 public:
  explicit ScratchLoggerDir(const std::string& name) : dir_(make_scratch_dir("/tmp", name)) {
    logger::set_logger_dir(dir_.string(), 'k');
  }
  ~ScratchLoggerDir() {
    logger::unset_logger_dir();
    std::filesystem::remove_all(dir_);
  }
  const std::filesystem::path& dir() const { return dir_; }
  ScratchLoggerDir(const ScratchLoggerDir&) = delete;
  ScratchLoggerDir& operator=(const ScratchLoggerDir&) = delete;

 private:
  std::filesystem::path dir_;
};

// How a benchmark splits `steps` into epochs of at most a million steps: the per-epoch hooks are
// part of the measurement as in a real job, amortised over many steps.
struct EpochShape {
  int64_t steps_per_epoch;
  int64_t epochs;
};
inline EpochShape epoch_shape(int64_t steps) {
  constexpr int64_t kMaxStepsPerEpoch = 1000000;
  if (steps <= kMaxStepsPerEpoch) return {steps, 1};
  return {kMaxStepsPerEpoch, (steps + kMaxStepsPerEpoch - 1) / kMaxStepsPerEpoch};
}

}  // namespace trainpack::bench
