// What the checkpoint file (trainpack/utils/checkpoint.h) and the directory's `checkpoint` index
// (trainpack/utils/checkpoint_index.h) share: the error their readers throw and their writers'
// options.
#pragma once

#include <stdexcept>
#include <string>

#include <torch/arg.h>

namespace trainpack {

// A checkpoint (or an index file) that cannot be used: missing, truncated, failing its checksum,
// malformed. what() names the file and says what is wrong with it.
class CheckpointError : public std::runtime_error {
 public:
  CheckpointError(const std::string& path, const std::string& reason)
      : std::runtime_error(path + ": " + reason), path_(path) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct CheckpointWriteOptions {
  // fsync every file and the directory (the default; off only for benchmarks and tests).
  TORCH_ARG(bool, fsync) = true;
};

}  // namespace trainpack
