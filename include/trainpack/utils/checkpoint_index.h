// The `checkpoint` index file of a checkpoint directory (TensorFlow's CheckpointState, in its text
// form): the latest checkpoint and those kept, relative to the directory, oldest first. ModelSaver
// writes it; SaverRestore and AutoResumeTrainConfig read it. docs/save-load.md shows the file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainpack/utils/checkpoint_common.h"

namespace trainpack {

struct CheckpointIndex {
  // The latest checkpoint ("model-600").
  std::string model_checkpoint_path;
  // Every checkpoint kept, the latest last.
  std::vector<std::string> all_model_checkpoint_paths;
  // Save times (seconds since the epoch), one per path above, or none.
  std::vector<double> all_model_checkpoint_timestamps;
  // The save time of the last checkpoint kept by the hours rule (0 when none).
  double last_preserved_timestamp = 0;
};

// The index's file name, and its swap file's (the index before the latest write; nothing reads it).
constexpr const char* kCheckpointIndexFile = "checkpoint";
constexpr const char* kCheckpointIndexSwapFile = "checkpoint.previous";

// Reads `<dir>/checkpoint`; nullopt when there is none. Throws CheckpointError naming the file and
// the line and field (never its text) when it is malformed, or when it is a symbolic link.
std::optional<CheckpointIndex> read_checkpoint_index(const std::string& dir);

// read_checkpoint_index's parser: what TensorFlow writes (blank lines, `#` comments, single or
// double quotes with C escapes, no timestamps). `path` names the file in errors.
CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& path);

// Replaces `<dir>/checkpoint` atomically and durably, through the swap file, as protobuf's text
// format writes it. Throws std::invalid_argument for an empty model_checkpoint_path or timestamps
// that do not match the paths, std::runtime_error naming the file when it cannot be written.
void write_checkpoint_index(const std::string& dir, const CheckpointIndex& index,
                            const CheckpointWriteOptions& options = {});

// "" when the index entry `entry` names a checkpoint in `dir` itself whose `.data` is a regular
// file (`*prefix`, if given, is set to its prefix); else why not ("... does not exist", ...).
std::string index_entry_problem(const std::string& dir, const std::string& entry,
                                std::string* prefix = nullptr);

}  // namespace trainpack
