// Checkpoint files (tensorpack's checkpoints): a name -> tensor map in one file, `<prefix>.data`
// (prefix `<dir>/model-600`): a zip archive that Python's torch.load reads, whose zip comment is a
// checksum trailer. Written atomically and durably. Format and guarantees: docs/save-load.md.
// Errors: CheckpointError naming a file that cannot be used; std::runtime_error naming the file
// and the system's reason for a failed write; std::invalid_argument for bad arguments.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include "trainpack/utils/checkpoint_common.h"
#include "trainpack/utils/checkpoint_index.h"  // once declared here: still included

namespace trainpack {

// The tensors of a checkpoint, by name, in name order.
using TensorMap = std::map<std::string, at::Tensor>;

// `t` as a checkpoint holds it: detached, on the CPU; `t` itself (no dispatcher call) when it is.
inline at::Tensor checkpoint_form(const at::Tensor& t) {
  at::Tensor out = t.requires_grad() ? t.detach() : t;
  return out.is_cpu() ? out : out.to(at::kCPU);
}

// Writes `tensors` (from the CPU) as `<prefix>.data`. When the file cannot be written, the
// temporary file is removed and an existing checkpoint under `prefix` is left as it was.
void write_checkpoint(const std::string& prefix, const TensorMap& tensors,
                      const CheckpointWriteOptions& options = {});

struct CheckpointReadOptions {
  // Read only a regular file owned by this process's user, never through a symbolic link (for
  // what auto-resume finds by itself in a directory others may write).
  TORCH_ARG(bool, own_files_only) = false;
};

// Reads the checkpoint `prefix` after checking its trailer (CRC-32C, entry count) and what
// LibTorch's reader trusts (zip directory, pickle lengths, storage and tensor bounds). Throws
// CheckpointError naming the file and what is wrong (missing, truncated, corrupt or crafted).
TensorMap read_checkpoint(const std::string& prefix, const CheckpointReadOptions& options = {});

// read_checkpoint on the bytes of a whole data file; `path` names it in errors.
TensorMap decode_checkpoint(const std::vector<char>& data, const std::string& path);

// read_checkpoint's checks of file and trailer, no decoding: "" when they pass, else the message.
std::string verify_checkpoint(const std::string& prefix, const CheckpointReadOptions& options = {});

// Whether `<prefix>.data` exists (complete, valid or not).
bool checkpoint_exists(const std::string& prefix);

// The trailer of checkpoint `prefix`, read from the file's end only; nullopt when the file is
// missing or its trailer invalid. Equal fingerprints: the same bytes, up to a CRC collision.
std::optional<std::string> checkpoint_fingerprint(const std::string& prefix);

// Deletes checkpoint `prefix`; a missing file is no error, other failures are warnings.
void remove_checkpoint(const std::string& prefix);

// Copies checkpoint `from` to the prefix `to`, atomically and durably, after checking it.
void copy_checkpoint(const std::string& from, const std::string& to,
                     const CheckpointWriteOptions& options = {});

// tensorpack's get_checkpoint_path: the prefix of the checkpoint that `path` names (a directory
// or its `checkpoint` file: the index's latest; `.data` or `.index` removed, logged; a bare name
// in "."). Throws CheckpointError naming the path when no checkpoint is there.
std::string resolve_checkpoint_path(const std::string& path);

}  // namespace trainpack
