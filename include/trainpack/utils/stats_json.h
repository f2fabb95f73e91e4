// The stats.json format (tensorpack's JSONWriter file): writing it in Python json.dump's exact
// layout, and reading it back tolerantly. JSONWriter (trainpack/callbacks/json_writer.h) manages
// the file itself; this header knows only text.
//
// The file is one line holding a JSON array of objects whose values are numbers, as Python's
// `json.dump` writes it with its defaults (ensure_ascii=True, allow_nan=True): `", "` and `": "`
// separators, no newline at the end, floats as Python's `repr` (trainpack/utils/float_repr.h),
// NaN/Infinity/-Infinity as Python writes them, non-ASCII key characters as `\uXXXX` (lowercase
// hex, surrogate pairs above U+FFFF; invalid UTF-8 in a key is written as U+FFFD):
//
//   [{"cost": 0.6931471824645996, "epoch_num": 1, "global_step": 100}, {...}]
//
// Reading (parse_stats_file) accepts what Python's json.load accepts for such a file (NaN,
// Infinity and -Infinity included; a duplicate key keeps its first position and its last value)
// and tells apart
// - a valid file (white space after the closing `]` is allowed, as in Python; a writer that
//   appends at the `]` has to look at the last byte itself);
// - a truncated file: an append cut short (`[{...}, {"a": 1`), possibly with NUL bytes where a
//   power loss left data that never reached the disk (also after a complete `]`); its complete
//   entries are kept;
// - a malformed file (not JSON, not an array, an entry that is not an object of numbers, data
//   after the closing `]`), with a message saying why.
//
// Differences from tensorpack:
// - Python's json.load rejects a truncated file; parse_stats_file keeps its complete entries.
// - Values read back keep their kind: an integer stays an integer (int64_t; one above INT64_MAX
//   becomes a double), a float stays a float.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace trainpack {

// One value in stats.json: an integer (`epoch_num`, `global_step`, integers read from a file) or a
// float.
using StatValue = std::variant<int64_t, double>;

// One object of stats.json: (name, value) pairs in file order.
struct StatsEntry {
  std::vector<std::pair<std::string, StatValue>> items;

  // The value under `key`, or nullptr.
  const StatValue* find(const std::string& key) const;
  // Sets `key` in place if present (keeping its position), else appends it.
  void set(const std::string& key, StatValue value);
  // Removes `key` if present.
  void erase(const std::string& key);
  bool empty() const { return items.empty(); }

  bool operator==(const StatsEntry& other) const;
  bool operator!=(const StatsEntry& other) const { return !(*this == other); }
};

// The text that Python's json.dump writes for a value / an entry / a list of entries.
std::string format_stat_value(const StatValue& value);
// format_stat_value(value) appended to `out`, without allocating beyond out's growth.
void append_stat_value(std::string& out, double value);
std::string format_stats_entry(const StatsEntry& entry);
std::string format_stats_file(const std::vector<StatsEntry>& entries);
// The JSON string that Python's json.dump writes for a key, quotes included (`"caf\u00e9"`).
std::string format_stats_key(std::string_view key);

// What parse_stats_file found in a stats.json text.
struct ParsedStats {
  enum class Status { kValid, kTruncated, kMalformed };
  Status status = Status::kValid;
  // kValid / kTruncated: the complete entries; kMalformed: none.
  std::vector<StatsEntry> entries;
  // kTruncated: the bytes after the complete part (the incomplete tail, or what follows a
  // complete `]` when NUL bytes are among it).
  size_t bytes_ignored = 0;
  // kMalformed: why (e.g. `entry 1 is not a JSON object`).
  std::string message;
};

// Parses the whole text of a stats.json file. Never throws for bad input (only std::bad_alloc).
ParsedStats parse_stats_file(std::string_view text);

}  // namespace trainpack
