// JSONWriter: writes the scalars put to the monitors into `<logger dir>/stats.json`, tensorpack's
// layout byte for byte: one line holding a JSON array of objects, one object per trigger, with
// `epoch_num` and `global_step` last, as Python's `json.dump` writes it (`", "` and `": "`
// separators, no newline at the end, floats as Python's `repr`, NaN/Infinity/-Infinity as Python
// writes them, non-ASCII key characters as `\uXXXX`; the format and its tolerant reader are in
// trainpack/utils/stats_json.h):
//
//   [{"cost": 0.6931471824645996, "epoch_num": 1, "global_step": 100}, {...}]
//
// When an entry is written: in before_train (what earlier callbacks put there, with
// `epoch_num = starting_epoch - 1`), after every step but the last of an epoch, and at every epoch
// end, each time only if something was put since the previous entry. Within an entry the last
// value put under a name wins, and names keep the position of their first put. Nothing is written
// in after_train (as in tensorpack: values put there are lost).
//
// On start (before_train), an existing stats.json is
// - appended to when its last entry's `epoch_num` + 1 is the trainer's starting_epoch, or it has
//   no usable `epoch_num` (INFO `Found existing JSON inside <dir>, will append to it.`);
// - otherwise moved to `stats.json.<MMDD-HHMMSS>` with tensorpack's three warnings (`History
//   epoch=5 from JSON is not the predecessor of the current starting_epoch=1`, `If you want to
//   resume old training, ...`, `Now, we will train with starting_epoch=1 and backup old json to
//   <path>`), and a new file is started;
// - when the run resumes from a checkpoint (Trainer::restored_resume_point(), set by SaverRestore
//   or AutoResumeTrainConfig), appended to whatever its last epoch: the checkpoint's counters are
//   the truth (docs/tensorpack-differences.md #7). Entries with a global_step after the
//   checkpoint's (written by the run that stopped, for steps that now run again) are dropped with a
//   warning that names both steps; the file as found is copied to
//   `stats.json.before-resume-<MMDD-HHMMSS>` first and stats.json is rewritten once. A last entry
//   whose epoch_num is neither the checkpoint's epoch nor the one before is a warning naming both;
// - if it is malformed (not JSON, not an array, an entry that is not an object of numbers), moved
//   to `stats.json.malformed-<MMDD-HHMMSS>` with the warning `<path> is not a valid stats file
//   (<reason>); moved it to <backup> and starting a new stats.json.`, and a new file is started;
// - if it is truncated (an append cut short: `[{...}, {"a": 1`), its complete entries are kept
//   with a warning; the file as found is copied to `stats.json.truncated-<MMDD-HHMMSS>`, and
//   stats.json is rewritten once (temporary file, fsync, rename) without the incomplete tail.
//   (A valid file followed by white space is rewritten the same way, its copy named
//   `stats.json.orig-<MMDD-HHMMSS>`.)
// A valid file is appended to as it is: the bytes already in it are never rewritten. No file is
// ever deleted or replaced before a copy of it exists; a backup name already taken gets `-1`,
// `-2`, ... added. If the file cannot be set aside or opened, an ERROR says so and nothing is
// written to it during this training.
//
//   monitors.push_back(trainpack::JSONWriter::create());  // a NoOpMonitor without a logger dir
//
// Differences from tensorpack (docs/tensorpack-differences.md #8, fixed):
// - The cost of a write is proportional to the new entry, not to the whole history: the file is
//   kept open and each entry replaces the closing `]` with `, {entry}]` (one pwrite). tensorpack
//   dumps the whole list to `stats.json.tmp` and renames it at every trigger (quadratic over a
//   run). The first entry of a new file is written to a temporary file, fsynced and renamed in.
// - Durability: fdatasync at every epoch end and after before_train's entry, not after the
//   per-step entries (an fsync costs milliseconds; with scalars put every step it would dominate
//   the step time). A process crash loses nothing that was written (it is in the page cache); a
//   power loss loses at most the step entries of the current epoch.
// - Crash behaviour: after every completed write the file is valid JSON that Python's json.load
//   reads. A crash (or power loss) in the middle of an append can leave an incomplete last entry
//   (`[{...}, {"a": 1`, possibly with NUL bytes after it after a power loss): Python's json.load
//   rejects that file, while load_existing_json keeps its complete entries with a warning, and the
//   next JSONWriter on that directory repairs it as described above.
// - A malformed or truncated file found at start is kept aside instead of making training fail.
// - Scalars are doubles, so they are always written as floats (`100.0`); `epoch_num` and
//   `global_step` are integers. Values read back keep their kind (an integer stays an integer).
// - The directory is the logger directory at construction (tensorpack reads it in before_train).
// - A write error logs `Exception in JSONWriter._write_stat()! <reason>` (ERROR) and training
//   goes on, as in tensorpack; the next write then rewrites the whole file (temporary file and
//   rename) so that it holds every entry again. Unlike tensorpack, the error (and a file found at
//   start that could not be adopted) is reported to the trainer (Trainer::report_write_failure),
//   so the run ends with WriteFailedError naming stats.json instead of a success.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainpack/callbacks/monitor_base.h"
#include "trainpack/utils/stats_json.h"  // StatValue, StatsEntry, the format and the reader

namespace trainpack {
struct ResumePoint;  // trainpack/train/trainer.h
}  // namespace trainpack

namespace trainpack {

class JSONWriter : public MonitorBase {
 public:
  static constexpr const char* FILENAME = "stats.json";

  // Writes into the current logger directory. Throws std::invalid_argument when none is set.
  JSONWriter();
  ~JSONWriter() override;

  // tensorpack's `JSONWriter()`: a JSONWriter, or, when no logger directory is set, a
  // NoOpMonitor("JSONWriter") with the warning `logger directory was not set. Ignore JSONWriter.`
  static MonitorPtr create();

  std::string name() const override { return "JSONWriter"; }

  // The entries of `<dir>/stats.json` (`dir` defaults to the logger directory), or nullopt when
  // the file does not exist. A truncated file gives its complete entries, with a warning that
  // names the file and how many entries were kept. Throws std::runtime_error naming the file when
  // it cannot be read or is malformed, and std::invalid_argument when no directory is given and no
  // logger directory is set.
  static std::optional<std::vector<StatsEntry>> load_existing_json(
      std::optional<std::string> dir = {});
  // int(`epoch_num` of the last entry) of `<dir>/stats.json`; nullopt on any failure (no file, no
  // entry, no epoch_num, a malformed file, ...).
  static std::optional<int64_t> load_existing_epoch_number(std::optional<std::string> dir = {});

  // The text that Python's json.dump writes for a value / an entry / a list of entries
  // (forwards to format_stat_value / format_stats_entry / format_stats_file).
  static std::string format_value(const StatValue& value) { return format_stat_value(value); }
  static std::string dump(const StatsEntry& entry) { return format_stats_entry(entry); }
  static std::string dump(const std::vector<StatsEntry>& entries) {
    return format_stats_file(entries);
  }

  void process_scalar(const std::string& name, double value) override;

  // The path of stats.json.
  const std::string& path() const { return path_; }
  // Every entry of the file as this writer knows it (loaded ones included).
  const std::vector<StatsEntry>& stats() const { return stats_; }

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger_step() override;
  void _trigger_epoch() override;
  void _trigger() override;
  void _after_train() override;

 private:
  // Adopts the file found at start (append / back up / move aside / repair).
  void adopt_existing_file();
  // Without a resume point: whether the last entry's epoch_num + 1 is the starting epoch (or
  // absent); warns as tensorpack does when not.
  bool follows_starting_epoch(const std::vector<StatsEntry>& entries) const;
  // With a resume point: drops the entries after its global_step (warning); true if any.
  bool keep_entries_up_to(std::vector<StatsEntry>& entries, const ResumePoint& resumed) const;
  // Writes the entry just added to stats_; logs write errors.
  void write_stat();
  // Replaces the file with all of stats_ (temporary file, fsync, rename) and opens it for appends.
  void rewrite_all();
  // fdatasync if something was written since the last sync; logs errors.
  void sync();
  void close_file();

  std::string dir_;
  std::string path_;
  std::vector<StatsEntry> stats_;
  StatsEntry stat_now_;
  int fd_ = -1;
  // Offset of the closing ']' in the open file.
  int64_t close_offset_ = 0;
  bool dirty_ = false;         // written since the last fdatasync
  bool need_rewrite_ = false;  // the file may not hold stats_ (after a write error)
  bool disabled_ = false;      // the file found at start could not be adopted safely
};

}  // namespace trainpack
