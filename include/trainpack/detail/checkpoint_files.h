// Helpers that the checkpoint file (src/utils/checkpoint.cpp, which defines them) and the
// `checkpoint` index (src/utils/checkpoint_index.cpp) share; not for users.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainpack {
namespace detail {

// A checkpoint's data file is `<prefix>` + this.
constexpr const char* kCheckpointDataSuffix = ".data";

// Reads the whole file; nullopt when it does not exist. Only a regular file is read (a FIFO is
// refused without blocking, a link to /dev/zero without reading it), and no more than
// `max_bytes`. Other errors: CheckpointError.
std::optional<std::vector<char>> read_checkpoint_file(const std::string& path, const char* kind,
                                                      uint64_t max_bytes, bool follow_symlinks,
                                                      bool owner_only = false);

// `name` in the directory `dir`; `name` itself when it is absolute.
std::string join_checkpoint_path(const std::string& dir, const std::string& name);

}  // namespace detail
}  // namespace trainpack
