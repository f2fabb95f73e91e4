// The `checkpoint` index file of a checkpoint directory, in TensorFlow's text form (ModelSaver
// writes it, the SessionInit family and AutoResumeTrainConfig read it):
//   model_checkpoint_path: "model-600"
//   all_model_checkpoint_paths: "model-500"
//   all_model_checkpoint_paths: "model-600"
//   all_model_checkpoint_timestamps: 1763850000.5
//   all_model_checkpoint_timestamps: 1763850060.25
//   last_preserved_timestamp: 1763849940
// with paths relative to the directory, oldest first.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainpack/utils/checkpoint_common.h"

namespace trainpack {

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
// The index's swap file beside it: write_checkpoint_index writes the new index into it and
// exchanges the two names (replace_file_by_swap), so it holds the index as it was before the
// latest write, which may name checkpoints deleted since. Nothing reads it.
constexpr const char* kCheckpointIndexSwapFile = "checkpoint.previous";

// Reads `<dir>/checkpoint`; nullopt when there is none. Throws CheckpointError naming the file
// when it is malformed (an unknown field, a bad quote, timestamps not matching the paths, no
// model_checkpoint_path), or a symbolic link (never followed: ModelSaver writes a regular file).
// The messages give the line and field, never the file's text: it may not be the job's to show.
// Accepts what TensorFlow writes: blank lines and `#` comments, spaces around the ':', single or
// double quotes with C escapes, and no timestamps (older TF).
std::optional<CheckpointIndex> read_checkpoint_index(const std::string& dir);

// The parser of read_checkpoint_index, on the index's text; `path` names the file in errors.
CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& path);

// Replaces `<dir>/checkpoint` atomically and durably (with options.fsync), through the swap file
// `<dir>/checkpoint.previous` (utils/atomic_file.h: replace_file_by_swap). Writes the fields in
// the order shown at the top, strings escaped as protobuf's text format does (\" \\ \n and octal
// for bytes outside printable ASCII), numbers in their shortest exact form; a
// last_preserved_timestamp of 0 is left out, as proto3 leaves out zero fields. Throws
// std::invalid_argument for an empty model_checkpoint_path or timestamps that do not match the
// paths, std::runtime_error naming the file when it cannot be written.
void write_checkpoint_index(const std::string& dir, const CheckpointIndex& index,
                            const CheckpointWriteOptions& options = {});

// Checks an entry of the `checkpoint` index of `dir` (a model_checkpoint_path or one of the
// all_model_checkpoint_paths): returns "" and sets `*prefix` (when given) to `<dir>/<name>` when
// it names a checkpoint in `dir` itself whose `.data` is a regular file (not a link to one); else
// the reason, e.g. "a path outside the directory ..." (`../../etc/passwd`, an absolute path
// elsewhere), "... does not exist", "... is a symbolic link ...", "... is not a regular file". An
// index entry with a problem is ignored by the readers of the index, with a warning (or, where it
// is all there is to go by, a CheckpointError).
std::string index_entry_problem(const std::string& dir, const std::string& entry,
                                std::string* prefix = nullptr);

}  // namespace trainpack
