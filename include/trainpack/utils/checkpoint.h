// Checkpoint files: the on-disk form of a name -> tensor map (ModelSaver writes them, the
// SessionInit family and MinSaver read them). docs/save-load.md describes them for users.
//
// A checkpoint is named by its prefix, `<dir>/model-600`, and is one file:
//   model-600.data   the tensors: torch::pickle_save of a Dict[str, Tensor] (PyTorch's zip
//                    format), so that Python's `torch.load("model-600.data")` returns a dict;
//                    the zip's archive comment is trainpack's checksum trailer (below)
// The directory's `checkpoint` index file is utils/checkpoint_index.h.
//
// The trailer, exactly: the last bytes of the file are the zip comment
//   trainpack-checkpoint 2 entries=42 crc32c=1a2b3c4d
// (the format and its version, the number of tensors, and the CRC-32C, 8 lowercase hex digits,
// of every byte of the file before the trailer, the zip end record with the comment's length
// included). The reader is strict: the zip end record must be followed by exactly this text.
// A truncated file has lost its trailer; a flipped byte fails the CRC.
//
// Durability: the file is written to a temporary name in the same directory, fsynced, renamed,
// and the directory fsynced (utils/atomic_file.h), so a crash leaves either the old file or the
// new one, never a partial one under the final name: a `model-600.data` exists only complete.
//
//   write_checkpoint("train_log/run/model-600", collect_training_state(trainer));
//   TensorMap m = read_checkpoint(resolve_checkpoint_path("train_log/run"));  // the latest
//
// Errors: CheckpointError (a std::runtime_error) for anything wrong with a file that is read,
// naming the file; std::runtime_error naming the file and the system's reason for a failed
// write; std::invalid_argument for bad arguments.
//
// Differences from tensorpack (TensorFlow's checkpoints): the checkpoint is one file in PyTorch's
// zip format (`torch.load` reads it) instead of TF's `.index` + `.data-00000-of-00001` bundle,
// and it carries a checksum of the whole file; TF checks per-block CRCs, tensorpack adds no check
// of its own. The `checkpoint` index keeps TF's text form, so tools that read it keep working.
// Format 1 (trainpack before 2026-11-23) kept the checksum in a separate `model-600.index`; it is
// refused with a message that says so. (One file instead of two: each file that a save creates
// and a later save deletes costs a block free, which on some disks is a synchronous discard;
// BENCHMARKS.md, "Checkpoints".)
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include "trainpack/utils/checkpoint_common.h"
// The `checkpoint` index (CheckpointIndex, read_checkpoint_index, ...) was declared here: code that
// includes this header for it keeps compiling.
#include "trainpack/utils/checkpoint_index.h"

namespace trainpack {

// The tensors of a checkpoint, by name, in name order.
using TensorMap = std::map<std::string, at::Tensor>;

// `t` as a TensorMap to be saved holds it: not requiring grad, on the CPU, sharing memory with `t`
// where `t` is already there. detach() and to() are called only where they change something:
// each is a dispatcher call, and together they were a sixth of collecting the main job's training
// state (core/state.h, core/optimizer_state.h).
inline at::Tensor checkpoint_form(const at::Tensor& t) {
  at::Tensor out = t.requires_grad() ? t.detach() : t;
  return out.is_cpu() ? out : out.to(at::kCPU);
}

// Writes `tensors` as the checkpoint `prefix` (`<prefix>.data`), atomically and durably. Tensors
// are saved from the CPU (moved there first); the data file's zip archive is streamed into the
// temporary file from the tensors' own memory (the bytes that torch::jit::pickle_save would return,
// plus the trailer), its CRC-32C computed on the way. Throws std::runtime_error naming the file and
// the system's reason (e.g. "No space left on device", "File too large") when the file cannot be
// written; the temporary file is removed and an existing checkpoint under `prefix` is left as it
// was.
void write_checkpoint(const std::string& prefix, const TensorMap& tensors,
                      const CheckpointWriteOptions& options = {});

struct CheckpointReadOptions {
  // Read only a regular file owned by this process's user, never through a symbolic link: for
  // the checkpoints a job finds in its log directory by itself (auto-resume), where another user
  // who can write the directory could have planted one. A checkpoint named explicitly (SaverRestore
  // of a path the user gave) is read wherever it is.
  TORCH_ARG(bool, own_files_only) = false;
};

// Reads the checkpoint `prefix` and checks it against its trailer (CRC-32C, entry count), then
// checks what LibTorch's reader does not: the zip archive's directory (every entry inside the
// file), the pickle's length prefixes (before the unpickler allocates them), every storage
// exactly as long as its record, and every tensor inside its storage (storage_offset + sum of
// (size_i - 1) * stride_i < the storage's element count). Throws CheckpointError naming the file:
// a missing or empty data file, a truncated one, a checksum mismatch, a malformed or missing
// trailer (format 1 is named as such), a corrupt or crafted archive ("corrupt or crafted: the
// tensor 'conv1.weight' does not fit in its storage ..."), data that PyTorch cannot decode; with
// own_files_only, a link or another user's file.
TensorMap read_checkpoint(const std::string& prefix, const CheckpointReadOptions& options = {});

// read_checkpoint's checks and decoding of the bytes of a data file already read (`data`, the
// whole file, trailer included); `path` names the file in errors. What the fuzzers run.
TensorMap decode_checkpoint(const std::vector<char>& data, const std::string& path);

// Checks the checkpoint `prefix`'s file and trailer like read_checkpoint without decoding the
// tensors: returns an empty string when it is valid, else the reason (the same text
// CheckpointError would carry).
std::string verify_checkpoint(const std::string& prefix, const CheckpointReadOptions& options = {});

// True when `<prefix>.data` exists (the checkpoint was completely written, valid or not).
bool checkpoint_exists(const std::string& prefix);

// The trailer of checkpoint `prefix` (`trainpack-checkpoint 2 entries=... crc32c=...`), read
// from the end of the file without reading the rest; nullopt when the file is missing or has no
// valid trailer. Two checkpoints with the same fingerprint hold the same bytes, up to a CRC
// collision (MinSaver uses it to tell whether its copy is of a given checkpoint).
std::optional<std::string> checkpoint_fingerprint(const std::string& prefix);

// Deletes checkpoint `prefix`. A missing file is not an error; other failures are logged as
// warnings.
void remove_checkpoint(const std::string& prefix);

// Copies checkpoint `from` to `to` (another prefix, same or other directory), atomically and
// durably, after checking it; MinSaver's copy. Throws CheckpointError for a bad source,
// std::runtime_error naming the file when the copy cannot be written.
void copy_checkpoint(const std::string& from, const std::string& to,
                     const CheckpointWriteOptions& options = {});

// tensorpack's get_checkpoint_path: turns what a user may give into a checkpoint prefix.
//   "<dir>/checkpoint" or "<dir>"      -> the latest checkpoint that the index names
//   "<dir>/model-600.data" / ".index"  -> "<dir>/model-600" (logged as auto-corrected; `.index`
//                                         is what TensorFlow users name a checkpoint by)
//   "model-600"                        -> "./model-600"
// Throws CheckpointError naming the path when nothing usable is there (no index in a directory,
// an index naming nothing, or a latest entry with a problem: index_entry_problem; no
// `<prefix>.data` file).
std::string resolve_checkpoint_path(const std::string& path);

}  // namespace trainpack
