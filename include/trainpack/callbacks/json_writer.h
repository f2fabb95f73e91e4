// JSONWriter: writes the scalars put to the monitors into `<logger dir>/stats.json`, tensorpack's
// layout byte for byte: one line holding a JSON array of objects, one object per trigger, with
// `epoch_num` and `global_step` last, as Python's `json.dump` writes it (`", "` and `": "`
// separators, no newline at the end, floats as Python's `repr`, NaN/Infinity/-Infinity as Python
// writes them, non-ASCII key characters as `\uXXXX`; the format and its tolerant reader are in
// trainpack/utils/stats_json.h):
//
//   [{"cost": 0.6931471824645996, "epoch_num": 1, "global_step": 100}, {...}]
//
// When an entry is made: in before_train (what earlier callbacks put there, with
// `epoch_num = starting_epoch - 1`), after every step but the last of an epoch, and at every epoch
// end, each time only if something was put since the previous entry. Within an entry the last
// value put under a name wins, and names keep the position of their first put. Nothing is written
// in after_train (as in tensorpack: values put there are lost).
//
// Readers: every state of stats.json that a reader can open is a complete file, valid JSON that
// Python's json.load reads, also while entries are added and after a crash of the process. A
// write never changes the file that stats.json names: it writes the whole new content to a
// temporary file in the same directory (`stats.json.tmp.<pid>.<n>`) and renames it over
// stats.json (as tensorpack does), so a reader gets the previous version or the new one, and a
// reader that opened a version keeps reading that version.
//
// Threads: the training thread only notes the values and queues each entry (under a mutex; no
// system call, and no allocation once the names have been seen). A thread owned by the writer,
// started in before_train (after the file found at start was dealt with, which stays on the
// training thread) and joined in after_train (or the destructor), formats the entries as they
// come and writes the file, gathering entries for at least 10 ms so that one write carries many;
// when an epoch end (or before_train) asks for it, the next write is synced to the disk (epoch
// ends that come while it is busy share the next one). Every write replaces the whole file, so
// its cost grows with the file: after a write that took d, the next comes no sooner than 9 d
// later (an epoch end's included; flush() and after_train excepted), which keeps the writer's
// thread, and the disk, busy with stats.json at most a tenth of the time however long the run
// (BENCHMARKS.md, "stats.json: writing the whole file": a file of 1,000,000 entries, 70 MB, takes
// 0.1 to 0.3 s to write, so its writes come a few seconds apart). The training thread waits for
// none of it. after_train waits until every entry is written and synced: the file is complete
// and on the disk when train() returns. A reader of the file during training in this process
// calls flush() first. The queue is bounded (about 130,000 one-scalar entries): a training
// thread that far ahead of the disk waits for it.
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
// - when the run resumes from a checkpoint saved at an epoch end whose entry the file lacks (the
//   run that wrote it stopped between the save and the entry: a kill, a crash), the entry is added
//   from the checkpoint's record of it (see State below), with INFO `<path> had no entry for epoch
//   N (global_step S); added it from the checkpoint's record.`; epochs missing before that one
//   cannot be recovered, and a WARN names them;
// - if it is malformed (not JSON, not an array, an entry that is not an object of numbers), moved
//   to `stats.json.malformed-<MMDD-HHMMSS>` with the warning `<path> is not a valid stats file
//   (<reason>); moved it to <backup> and starting a new stats.json.`, and a new file is started;
// - if it is truncated (an append cut short: `[{...}, {"a": 1`), its complete entries are kept
//   with a warning; the file as found is copied to `stats.json.truncated-<MMDD-HHMMSS>`, and
//   stats.json is rewritten once (temporary file, fsync, rename) without the incomplete tail.
//   (A valid file followed by white space is rewritten the same way, its copy named
//   `stats.json.orig-<MMDD-HHMMSS>`.)
// - before any of the above, when a run that did not end left `.stats.json.synced` (see
//   Durability below) holding more complete entries than stats.json (a power loss cut the
//   unsynced versions short), stats.json is moved to `stats.json.incomplete-<MMDD-HHMMSS>` and
//   the synced copy takes its name, with the warning `<path> holds N complete entries after the
//   run that wrote it was cut off; restored the copy synced at its last epoch end, which holds M
//   entries (the file as found is kept as <backup>).` (`is not a valid stats file (<reason>)` for
//   an unreadable one); otherwise the copy is removed.
// A valid file is appended to as it is: every write keeps its bytes as they are, followed by the
// new entries. No file is ever deleted or replaced before a copy of it exists; a backup name
// already taken gets `-1`, `-2`, ... added. If the file cannot be set aside or restored, an ERROR
// says so and nothing is written to it during this training.
//
//   monitors.push_back(trainpack::JSONWriter::create());  // a NoOpMonitor without a logger dir
//
// Differences from tensorpack (docs/tensorpack-differences.md #8, fixed):
// - The cost over a run is linear, not quadratic: tensorpack dumps the whole list to
//   `stats.json.tmp` and renames it at every trigger, on the training thread. trainpack writes
//   the same way, but on the writer's thread, for the entries of at least 10 ms at once, and with
//   the rest above after each write, so that the time spent writing is at most a tenth of the
//   run's.
// - Durability: the write that follows an epoch end (and before_train's entry) is synced to the
//   disk (the temporary file is fsynced before the rename, the directory after it); the writes
//   of per-step entries in between are not (an fsync costs milliseconds, and every version
//   would reach the disk). A version that was not synced replaces stats.json only while the last
//   synced one keeps a second name, `.stats.json.synced` (a hard link, made after each synced
//   write; removed when training ends with stats.json synced): on a filesystem that may write a
//   rename before the renamed file's data (XFS; ext4 and btrfs order them), a power loss can
//   leave stats.json empty or short, and the next JSONWriter then restores the synced copy
//   (above). Where the filesystem has no hard links, every write is synced. A process crash loses
//   the entries not yet written: those of the last 10 ms or so before it, or of the rest after a
//   long write. A power loss loses at most the entries since the last synced write, which follows
//   each completed epoch end. after_train waits for the last write and its sync.
// - Crash behaviour: a crash never leaves an incomplete stats.json (see Readers above); a
//   temporary file it leaves is removed by the next logger::set_logger_dir on the directory. A
//   file found incomplete anyway (a power loss on a filesystem that does not order the writes,
//   or a file written by something else: `[{...}, {"a": 1`, possibly with NUL bytes after it) is
//   one that Python's json.load rejects; load_existing_json keeps its complete entries with a
//   warning, and the next JSONWriter on that directory repairs it as described above.
// - A malformed or truncated file found at start is kept aside instead of making training fail.
// - Scalars are doubles, so they are always written as floats (`100.0`); `epoch_num` and
//   `global_step` are integers. Values read back keep their kind (an integer stays an integer).
// - The directory is the logger directory at construction (tensorpack reads it in before_train).
// - A write error logs `Exception in JSONWriter._write_stat()! <reason>` (ERROR, from the
//   writer's thread) and training goes on, as in tensorpack; the next write (at the next entry or
//   epoch end) holds every entry again, as every write does. Unlike tensorpack, the error (and a
//   file found at start that could not be adopted) is reported to the trainer
//   (Trainer::report_write_failure, on the training thread: at the first epoch end after the
//   writer's thread met it, or in after_train at the latest), so the run ends with
//   WriteFailedError naming stats.json instead of a success.
//
// State (checkpoints): at an epoch end, a checkpoint is saved (ModelSaver) before the monitors
// make the epoch's entry; the checkpoint records that entry as gathered so far (`record_epoch`,
// `record_step`, `record_names`: the names joined by NUL bytes, `record_values`), so that a
// resumed run can add it to a stats.json that lacks it. The record holds what was put before the
// save: values that callbacks after the ModelSaver put at that epoch end are not in it. Only a
// save during the epoch-end callbacks (after_epoch to trigger_epoch) records an entry; one during
// the epoch (a ModelSaver every k steps, a stop signal) records nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/monitor_base.h"
#include "trainpack/utils/stats_json.h"  // StatValue, StatsEntry, the format and the reader

namespace trainpack {
struct ResumePoint;  // trainpack/core/resume_point.h
}  // namespace trainpack

namespace trainpack {

struct JSONWriterOptions {
  // Called on the writer's thread with "write" before each write of stats.json and with
  // "fdatasync" before a write is synced to the disk (after its data is written, before the
  // rename). For tests: a hook that blocks shows what the training thread does not wait for; one
  // that throws is a write error.
  TORCH_ARG(std::function<void(const char* what)>, io_hook) = nullptr;
};

class JSONWriter : public MonitorBase {
 public:
  static constexpr const char* FILENAME = "stats.json";

  // Writes into the current logger directory. Throws std::invalid_argument when none is set.
  explicit JSONWriter(JSONWriterOptions options = {});
  // Writes what is queued, fdatasyncs and closes the file (joins the writer's thread).
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

  // Notes the value for the next entry (no system call, no allocation for a name seen before).
  void process_scalar(const std::string& name, double value) override;

  // See "State" above.
  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

  // Returns once every entry made so far is written to stats.json (in the page cache, not
  // necessarily on the disk), for a reader of the file during training; it does not wait for the
  // rest that follows a write. A write that failed meanwhile is reported at the next epoch end as
  // usual. Call it on the training thread (or when no training runs).
  void flush();

  // The path of stats.json.
  const std::string& path() const { return path_; }
  // Every entry of the file as this writer knows it (loaded ones included); waits for the
  // writer's thread as flush() does. Call it on the training thread or after training.
  std::vector<StatsEntry> stats() const;

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger_step() override;
  void _after_epoch() override { at_epoch_end_ = true; }
  void _trigger_epoch() override;
  void _trigger() override;
  void _after_train() override;

 private:
  struct Background;  // the writer's thread and what it shares with the training thread

  // Adopts the file found at start (append / back up / move aside / repair); sets the writer's
  // text.
  void adopt_existing_file();
  // Before adopting: a run that was cut off left the second name of its last synced version
  // (`.stats.json.synced`); restores it when stats.json holds fewer entries, removes it otherwise.
  // Throws when a file cannot be moved.
  void recover_synced_copy();
  // Logs why nothing is written to stats.json in this training, and makes it so.
  void give_up_on_file(const char* reason);
  // Without a resume point: whether the last entry's epoch_num + 1 is the starting epoch (or
  // absent); warns as tensorpack does when not.
  bool follows_starting_epoch(const std::vector<StatsEntry>& entries) const;
  // With a resume point: drops the entries after its global_step (warning); true if any.
  bool keep_entries_up_to(std::vector<StatsEntry>& entries, const ResumePoint& resumed) const;
  // The id of `name` in names_ (added when new; the writer's thread learns its JSON text).
  uint32_t intern(const std::string& name);
  // Writes what is queued on the calling thread (when the writer's thread does not run).
  void drain_inline();
  // Queues an fdatasync of everything queued so far (the writer's thread does it).
  void request_sync();
  // Reports the write failures of the writer's thread to the trainer (on the training thread).
  void report_failures();
  // Stops and joins the writer's thread after it wrote and fdatasynced everything queued.
  void stop_background();
  // Queues the recorded entry of the checkpoint this run resumes from when the file lacks it.
  void fill_from_record();

  std::string dir_;
  std::string path_;
  JSONWriterOptions options_;
  std::unique_ptr<Background> bg_;

  // ---- the training thread's own ----
  struct Slot {
    uint32_t id;
    double value;
  };
  // Names seen so far, by id (ids 0 and 1: `epoch_num` and `global_step`, which the counters
  // overwrite), and the index to find them.
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> ids_;
  // The entry being gathered: one slot per name, in the order of the first put.
  std::vector<Slot> current_;
  bool put_since_entry_ = false;  // something was put (a counter's name included)
  // The ids put for the previous entry, in put order: the next entry's puts are usually the same
  // names in the same order, found by one string comparison instead of a hash lookup.
  std::vector<uint32_t> previous_puts_;
  std::vector<uint32_t> puts_;
  bool disabled_ = false;  // the file found at start could not be adopted safely

  // The epoch-end entry that the restored checkpoint recorded (load_state), and the epoch_num of
  // the last entry kept from the file found at start (adopt_existing_file).
  struct Record {
    int64_t epoch = 0;
    int64_t step = 0;
    std::vector<std::pair<std::string, double>> values;
  };
  std::optional<Record> record_;
  bool at_epoch_end_ = false;  // between this epoch's after_epoch and this writer's trigger_epoch
  std::optional<double> last_kept_epoch_;
};

}  // namespace trainpack
