// Test support: reading and writing whole files, and a file-size limit for the tests of failed
// writes (disk full, quota).
#pragma once

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace trainpack {

// trainpack/utils/process_io.h (declared here: some test tools that include this file are built
// without the library's include directory, and use nothing that calls it).
void protect_process_io();

namespace testing {

// The bytes of `p` ("" when it cannot be opened).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Replaces the content of `p` with `text`.
inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

// The names of the temporary files of AtomicFileWriter (`<name>.tmp.<pid>.<n>`) in `dir`, sorted:
// what a failed or interrupted write would leave behind.
inline std::vector<std::string> temporary_files(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The temporary file name AtomicFileWriter uses for `path` has this form: `<path>.tmp.<pid>.<n>`.
// A regular expression (std::regex ECMAScript) matching it, for messages that name it.
inline std::string temporary_name_pattern(const std::string& path) {
  std::string escaped;
  for (const char c : path) {
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) escaped += '\\';
    escaped += c;
  }
  return escaped + "\\.tmp\\.[0-9]+\\.[0-9]+";
}

// Sets the soft RLIMIT_FSIZE (with SIGXFSZ ignored, so that a write past it fails with EFBIG
// instead of killing the process) while it lives.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    // What the library does at the start of a run (trainpack/utils/process_io.h): SIGXFSZ is
    // ignored, so a write past the limit fails with EFBIG. Left so afterwards.
    protect_process_io();
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() { setrlimit(RLIMIT_FSIZE, &saved_); }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
};

}  // namespace testing
}  // namespace trainpack
