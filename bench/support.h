// Small helpers shared by the benchmark programs: the median of timings, the `--reps R --dir DIR`
// command line of the file-writing benchmarks, and their scratch directory.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace trainpack::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

}  // namespace trainpack::bench
