// Checkpoint files: the on-disk form of a name -> tensor map (ModelSaver writes them, the
// SessionInit family and MinSaver read them). docs/save-load.md describes them for users.
//
// A checkpoint is named by its prefix, `<dir>/model-600`, and is two files sharing it, as
// TensorFlow's are:
//   model-600.data   the tensors: torch::pickle_save of a Dict[str, Tensor] (PyTorch's zip
//                    format), so that Python's `torch.load("model-600.data")` returns a dict
//   model-600.index  a small text file written after the data file: the format version, the
//                    data file's size and CRC-32C, and the entry count; it is what makes the
//                    checkpoint exist (a data file without its index is an unfinished save)
// and the directory's `checkpoint` index file, in TensorFlow's text form:
//   model_checkpoint_path: "model-600"
//   all_model_checkpoint_paths: "model-500"
//   all_model_checkpoint_paths: "model-600"
//   all_model_checkpoint_timestamps: 1763850000.5
//   all_model_checkpoint_timestamps: 1763850060.25
//   last_preserved_timestamp: 1763849940
// with paths relative to the directory, oldest first.
//
// Durability: every file is written to a temporary name in the same directory, fsynced, renamed,
// and the directory fsynced (utils/atomic_file.h), so a crash leaves either the old file or the
// new one, never a partial one under the final name.
//
// The `.index` file, exactly (one `key: value` per line, each ended by '\n'; the reader is strict:
// the format line first, then each other key exactly once, no other key):
//   format: trainpack-checkpoint 1
//   data_bytes: 864666
//   data_crc32c: 0x1a2b3c4d          (CRC-32C of the whole .data file, 8 lowercase hex digits)
//   entries: 42
//
//   write_checkpoint("train_log/run/model-600", collect_training_state(trainer));
//   TensorMap m = read_checkpoint(resolve_checkpoint_path("train_log/run"));  // the latest
//
// Errors: CheckpointError (a std::runtime_error) for anything wrong with a file that is read,
// naming the file; std::runtime_error naming the file and the system's reason for a failed
// write; std::invalid_argument for bad arguments.
//
// Differences from tensorpack (TensorFlow's checkpoints): the data file is PyTorch's zip format
// (`torch.load` reads it) instead of TF's `.data-00000-of-00001` bundle, and the `.index` is a
// text file holding a checksum; TF checks per-block CRCs, tensorpack adds no check of its own.
// The `checkpoint` index keeps TF's text form, so tools that read it keep working.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

namespace trainpack {

// The tensors of a checkpoint, by name, in name order.
using TensorMap = std::map<std::string, at::Tensor>;

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

// Writes `tensors` as the checkpoint `prefix` (`<prefix>.data`, then `<prefix>.index`), each
// atomically and durably. Tensors are saved from the CPU (moved there first); the data file's
// zip archive is streamed into the temporary file from the tensors' own memory (the bytes that
// torch::jit::pickle_save would return), its CRC-32C computed on the way. Throws
// std::runtime_error naming the file and the system's reason (e.g. "No space left on device",
// "File too large") when a file cannot be written; the temporary files are removed and an
// existing checkpoint under `prefix` is left as it was.
void write_checkpoint(const std::string& prefix, const TensorMap& tensors,
                      const CheckpointWriteOptions& options = {});

// Reads the checkpoint `prefix` and checks it (the index's size and CRC-32C against the data
// file). Throws CheckpointError naming the file: a missing index or data file, a truncated data
// file, a checksum mismatch, a malformed index, data that PyTorch cannot decode.
TensorMap read_checkpoint(const std::string& prefix);

// Checks the checkpoint `prefix` like read_checkpoint without decoding the tensors: returns an
// empty string when it is valid, else the reason (the same text CheckpointError would carry).
std::string verify_checkpoint(const std::string& prefix);

// True when `<prefix>.index` exists (the checkpoint was completely written, valid or not).
bool checkpoint_exists(const std::string& prefix);

// Deletes the files of checkpoint `prefix` (index first, so that a crash halfway leaves no
// index without data). Missing files are not an error; other failures are logged as warnings.
void remove_checkpoint(const std::string& prefix);

// Copies checkpoint `from` to `to` (another prefix, same or other directory), atomically and
// durably, data file first; MinSaver's copy. Throws std::runtime_error naming the file.
void copy_checkpoint(const std::string& from, const std::string& to,
                     const CheckpointWriteOptions& options = {});

// The `checkpoint` index file of a directory (TensorFlow's CheckpointState).
struct CheckpointIndex {
  // The latest checkpoint, relative to the directory ("model-600").
  std::string model_checkpoint_path;
  // Every checkpoint the saver keeps track of, oldest first (the latest is last).
  std::vector<std::string> all_model_checkpoint_paths;
  // Save times (seconds since the epoch), one per entry of all_model_checkpoint_paths.
  std::vector<double> all_model_checkpoint_timestamps;
  // The save time of the last checkpoint kept by the hours rule (0 when none).
  double last_preserved_timestamp = 0;
};

// The file name of the index in a checkpoint directory.
constexpr const char* kCheckpointIndexFile = "checkpoint";

// Reads `<dir>/checkpoint`; nullopt when there is none. Throws CheckpointError naming the file
// when it is malformed (an unknown field, a bad quote, timestamps not matching the paths, no
// model_checkpoint_path). Accepts what TensorFlow writes: blank lines and `#` comments, spaces
// around the ':', single or double quotes with C escapes, and no timestamps (older TF).
std::optional<CheckpointIndex> read_checkpoint_index(const std::string& dir);

// Replaces `<dir>/checkpoint` atomically and durably (with options.fsync). Writes the fields in
// the order shown at the top, strings escaped as protobuf's text format does (\" \\ \n and octal
// for bytes outside printable ASCII), numbers in their shortest exact form; a
// last_preserved_timestamp of 0 is left out, as proto3 leaves out zero fields. Throws
// std::invalid_argument for an empty model_checkpoint_path or timestamps that do not match the
// paths, std::runtime_error naming the file when it cannot be written.
void write_checkpoint_index(const std::string& dir, const CheckpointIndex& index,
                            const CheckpointWriteOptions& options = {});

// tensorpack's get_checkpoint_path: turns what a user may give into a checkpoint prefix.
//   "<dir>/checkpoint" or "<dir>"      -> the latest checkpoint that the index names
//   "<dir>/model-600.data" / ".index"  -> "<dir>/model-600" (logged as auto-corrected)
//   "model-600"                        -> "./model-600"
// Throws CheckpointError naming the path when nothing usable is there (no index in a directory,
// an index naming nothing, no `<prefix>.index` file).
std::string resolve_checkpoint_path(const std::string& path);

}  // namespace trainpack
