// JSONWriter: tensorpack's JSONWriter. Writes the scalars put to the monitors into
// `<logger dir>/stats.json` in tensorpack's layout byte for byte (Python json.dump's; the format
// and its tolerant reader are trainpack/utils/stats_json.h):
//
//   [{"cost": 0.6931471824645996, "epoch_num": 1, "global_step": 100}, {...}]
//
// An entry is made in before_train (with `epoch_num = starting_epoch - 1`), after every step but
// the last of an epoch, and at every epoch end, each only if something was put since the previous
// entry; nothing in after_train. Within an entry the last value put under a name wins, and names
// keep the position of their first put.
//
// The training thread only notes values and queues entries; StatsFileWriter
// (trainpack/utils/stats_file_writer.h) writes the whole file from its own thread (every version a
// reader opens is complete JSON), syncs the write after each epoch end, and is joined in
// after_train: the file is complete and on the disk when train() returns. A write error logs
// `Exception in JSONWriter._write_stat()! <reason>`, training goes on, and the run ends with
// WriteFailedError naming stats.json (Trainer::report_write_failure).
//
// On start, a stats.json found is appended to when its last epoch_num + 1 is the starting epoch
// (or it has none), moved aside with tensorpack's warnings otherwise; a resumed run
// (Trainer::restored_resume_point) appends whatever its epoch and drops the entries after the
// checkpoint's global_step; a malformed file is moved aside, a truncated one rewritten with its
// complete entries, a synced copy left by a power loss restored
// (trainpack/utils/stats_json_repair.h).
// No file is replaced or deleted before a copy of it exists.
//
// State: a checkpoint saved at an epoch end records the entry being gathered (`record_epoch`,
// `record_step`, `record_names` joined by NUL bytes, `record_values`); a resumed run whose file
// lacks that entry adds it. See docs/monitors.md, "stats.json", for the whole story.
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
#include "trainpack/utils/stats_file_writer.h"
#include "trainpack/utils/stats_json.h"  // StatValue, StatsEntry, the format and the reader

namespace trainpack {
struct ResumePoint;  // trainpack/core/resume_point.h
}  // namespace trainpack

namespace trainpack {

struct JSONWriterOptions {
  // For tests: StatsFileWriter's hook, called with "write" and "fdatasync" on its thread.
  TORCH_ARG(StatsFileWriter::IoHook, io_hook) = nullptr;
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
  // the file does not exist; a truncated file gives its complete entries with a warning. Throws
  // std::runtime_error naming a file that cannot be read or is malformed, std::invalid_argument
  // when there is neither `dir` nor a logger directory.
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

  // The epoch-end entry being gathered (see "State" above).
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
  // Adopts the file found at start (append / back up / move aside / repair) and gives the
  // writer its text.
  void adopt_existing_file();
  // Logs why nothing is written to stats.json in this training, and makes it so.
  void give_up_on_file(const char* reason);
  // Without a resume point: whether the last entry's epoch_num + 1 is the starting epoch (or
  // absent); warns as tensorpack does when not.
  bool follows_starting_epoch(const std::vector<StatsEntry>& entries) const;
  // With a resume point: drops the entries after its global_step (warning); true if any.
  bool keep_entries_up_to(std::vector<StatsEntry>& entries, const ResumePoint& resumed) const;
  // The id of `name` in names_ (added when new; the writer learns its JSON text).
  uint32_t intern(const std::string& name);
  // Reports the writer's write failures to the trainer (on the training thread).
  void report_failures();
  // Queues the recorded entry of the checkpoint this run resumes from when the file lacks it.
  void fill_from_record();

  std::string dir_;
  std::string path_;
  JSONWriterOptions options_;
  std::unique_ptr<StatsFileWriter> file_;

  // Names seen so far, by id (ids 0 and 1: `epoch_num` and `global_step`, which the counters
  // overwrite), and the index to find them.
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> ids_;
  // The entry being gathered: one value per name, in the order of the first put.
  std::vector<StatsFileWriter::Value> current_;
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
