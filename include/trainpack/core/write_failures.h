// The record of the writes that failed during training: files that a callback promised
// (ModelSaver's checkpoints, MinSaver's copy, stats.json, the event file) and could not write. The
// trainer keeps one, filled by Trainer::report_write_failure; when it is not empty at the end of
// training, main_loop throws WriteFailedError (docs/trainer.md, "When files cannot be written").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainpack {

// One write that failed: who promised the file, the file, the error, and the global_step.
struct WriteFailure {
  std::string callback;
  std::string path;
  std::string error;
  int64_t global_step = 0;
};

// The failed writes, oldest first, and the files they were of. Not synchronised: one thread (the
// trainer's) records.
class WriteFailureLedger {
 public:
  // How many failures are kept; every one is counted.
  static constexpr size_t kMaxKept = 100;

  // Records that `callback` could not write `path` at `global_step`; `error` is the reason.
  void record(const std::string& callback, const std::string& path, const std::string& error,
              int64_t global_step);
  // The failures recorded, oldest first (the first kMaxKept of them).
  const std::vector<WriteFailure>& kept() const { return kept_; }
  // How many were recorded (also those not kept).
  int64_t count() const { return count_; }
  bool empty() const { return count_ == 0; }
  // Every file that failed, in the order of its first failure.
  std::vector<std::string> paths() const;
  // "3 writes failed (2 files): <path> (ModelSaver, 2 failures), ...; the first error: <error>"
  // (the first 10 files, then "and <n> more"), or "" when none failed.
  std::string summary() const;

 private:
  // A file that failed: its path, the callback of its first failure, and how many failures.
  struct FailedFile {
    std::string path;
    std::string callback;
    int64_t failures;
  };
  std::vector<WriteFailure> kept_;
  int64_t count_ = 0;
  std::vector<FailedFile> files_;
};

}  // namespace trainpack
