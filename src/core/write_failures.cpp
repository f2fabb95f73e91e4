#include "trainpack/core/write_failures.h"

#include <fmt/format.h>

namespace trainpack {

void WriteFailureLedger::record(const std::string& callback, const std::string& path,
                                const std::string& error, int64_t global_step) {
  ++count_;
  if (kept_.size() < kMaxKept) kept_.push_back(WriteFailure{callback, path, error, global_step});
  for (auto& f : files_) {
    if (f.path == path) {
      ++f.failures;
      return;
    }
  }
  files_.push_back(FailedFile{path, callback, 1});
}

std::vector<std::string> WriteFailureLedger::paths() const {
  std::vector<std::string> out;
  out.reserve(files_.size());
  for (const auto& f : files_) out.push_back(f.path);
  return out;
}

std::string WriteFailureLedger::summary() const {
  if (count_ == 0) return "";
  constexpr size_t kFilesShown = 10;
  std::string files;
  for (size_t i = 0; i < files_.size() && i < kFilesShown; ++i) {
    const FailedFile& f = files_[i];
    files += fmt::format("{}{} ({}, {} failure{})", i == 0 ? "" : ", ", f.path, f.callback,
                         f.failures, f.failures == 1 ? "" : "s");
  }
  if (files_.size() > kFilesShown) {
    files += fmt::format(" and {} more", files_.size() - kFilesShown);
  }
  return fmt::format("{} write{} failed ({} file{}): {}; the first error: {}", count_,
                     count_ == 1 ? "" : "s", files_.size(), files_.size() == 1 ? "" : "s", files,
                     kept_.front().error);
}

}  // namespace trainpack
