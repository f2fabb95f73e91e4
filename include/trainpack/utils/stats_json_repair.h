// What to do with a stats file (trainpack/utils/stats_json.h) found at the start of a training:
// read it whatever state a crash or a power loss left it in, restore the copy synced at the last
// epoch end, set a malformed file aside, rewrite a truncated one. JSONWriter decides which
// (trainpack/callbacks/json_writer.h); these functions do it without losing a byte: no file is
// deleted or replaced before a copy of it exists, and a backup name already taken gets `-1`,
// `-2`, ... added. Each throws (naming the file and the reason) when a step cannot be done, and
// then leaves the file as it was.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainpack/utils/stats_json.h"

namespace trainpack {

// A stats file as found: its text without the NUL bytes at its end, its size on the disk, and
// what parse_stats_file made of the text.
struct FoundStatsFile {
  std::string text;
  uint64_t file_size = 0;
  ParsedStats parsed;
};

// The text of the stats file at `path` without its trailing NUL bytes (a power loss can leave a
// file padded with NULs or a hole; holes are skipped unread), and the file's size. Refuses a
// symlink, a FIFO or another kind of file that is not regular, and a text over 1 GiB
// (FileRefusedError); other errors are std::system_error naming the path.
std::string read_stats_text(const std::string& path, uint64_t* file_size);

// Reads and parses `path`; a file that cannot be read is kMalformed with the reason.
FoundStatsFile read_found_stats_file(const std::string& path);

// `<path>.<label><MMDD-HHMMSS>`, with `-1`, `-2`, ... added if that name is taken.
std::string stats_backup_path(const std::string& path, const std::string& label);

// Renames `from` to `to` and syncs the directory of `to`.
void move_stats_file(const std::string& from, const std::string& to);

// WARN `<path> is truncated (an append was cut short): kept its N complete entries, ignored the
// last B bytes.`
void warn_truncated_stats(const std::string& path, const ParsedStats& parsed);

// A run that did not end leaves StatsFileWriter's synced copy next to `path`. When it holds more
// complete entries than `path` (a power loss cut the unsynced versions short), `path` is moved
// to `<path>.incomplete-<time>` and the copy takes its name, with a WARN saying so; otherwise the
// copy is removed (after `path` is synced). Throws when a file cannot be moved.
void recover_synced_stats_copy(const std::string& path);

// Moves a malformed `path` to `<path>.malformed-<time>` with the WARN `<path> is not a valid
// stats file (<reason>); moved it to <backup> and starting a new <file name>.`
void set_aside_malformed_stats(const std::string& path, const ParsedStats& parsed);

// Keeps `found` as `<path>.<label><time>` (a hard link, or a synced copy where there are none),
// then replaces `path` with `entries` (temporary file, fsync, rename) and WARNs naming both.
// Returns the new text.
std::string rewrite_stats_file(const std::string& path, const FoundStatsFile& found,
                               const std::vector<StatsEntry>& entries, const std::string& label);

}  // namespace trainpack
