// Test support: scanning the library's own sources (include/ and src/) for a pattern, for the
// tests that keep a rule such as "only one file tests this macro".
#pragma once

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace trainpack::testing {

struct SourceScan {
  int files = 0;                      // .h and .cpp files read
  std::vector<std::string> matching;  // those with a line that matches, relative to the root
};

// Reads every .h and .cpp under `root`/include and `root`/src and lists the files with a line in
// which `pattern` is found (std::regex_search), in the order the directories are walked.
inline SourceScan scan_library_sources(const std::filesystem::path& root,
                                       const std::regex& pattern) {
  namespace fs = std::filesystem;
  SourceScan scan;
  for (const char* dir : {"include", "src"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp")) continue;
      ++scan.files;
      std::ifstream in(entry.path());
      for (std::string line; std::getline(in, line);) {
        if (std::regex_search(line, pattern)) {
          scan.matching.push_back(fs::relative(entry.path(), root).generic_string());
          break;
        }
      }
    }
  }
  return scan;
}

}  // namespace trainpack::testing
