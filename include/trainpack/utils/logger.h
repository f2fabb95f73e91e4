// The logger: tensorpack's console format, `[MMDD HH:MM:SS @file:line] message`, and the log
// directory that callbacks write into.
//
// Lines go to stdout (as tensorpack's handler does); WARNING and ERROR lines carry a `WRN ` or
// `ERR ` tag (DEBUG lines `DBG `). Colour is used only when stdout is a terminal (checked at every
// line). Use the TP_LOG_* macros, which take an fmt format string and record the caller's file
// and line.
//
// Once `set_logger_dir(dir, action)` was called, every line is also written, without colour and
// flushed line by line, to `<dir>/log.log`, whose first line is `Argv: <the command line>`.
//
//   logger::set_logger_dir("train_log/mnist", 'k');  // keep what a previous run left there
//   logger::auto_set_dir('d');                         // train_log/<program name>, emptied first
//
// Differences from tensorpack (docs/tensorpack-differences.md #10):
// - actions are case-insensitive (`'K'` is `'k'`); an action other than k, d, b, n, q is a
//   std::invalid_argument that lists the valid ones, checked whether or not the directory exists;
// - `q` throws a std::runtime_error that says the directory exists and lists the actions
//   (tensorpack raises `OSError("Directory ... exits!")`, and does the same for an unknown action);
// - `b` and `n` name the directory `<dir>.<MMDD-HHMMSS>`, with a dot (tensorpack appends the time
//   with no separator); if that name is taken, `-1`, `-2`... is added, so nothing is overwritten;
// - with no action, a non-empty directory and a stdin that is not a terminal, set_logger_dir
//   throws std::invalid_argument (tensorpack blocks on `input()`);
// - log.log holds plain text (tensorpack writes the colour codes into it too).
#pragma once

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace trainpack {
namespace logger {

enum class Level { kDebug = 10, kInfo = 20, kWarning = 30, kError = 40 };

// Writes one line at `level`, attributed to `file:line` (only the base name of `file` is shown),
// to stdout and, when a logger directory is set, to its log.log.
void log(Level level, const char* file, int line, std::string_view message);

// Text put before every message (after the `[time @file:line]` part and the level tag), e.g.
// "rank 1: " on the ranks other than the chief in data-parallel training. Default: none.
void set_message_prefix(std::string prefix);

// Lines below `level` are dropped. Default: kInfo.
void set_level(Level level);
Level level();

// A sink receives every line that passes the level filter, besides stdout; tests use it to read
// what was logged. Returns an id for remove_sink. Sinks run under the logger's lock: a sink must
// not log, nor add or remove sinks.
using Sink = std::function<void(Level, std::string_view message)>;
int add_sink(Sink sink);
void remove_sink(int id);

// The logger directory (normalised: `a//b/` is `a/b`), or nullopt when none was set.
std::optional<std::string> get_logger_dir();

// Makes `dir` the logger directory (tensorpack's logger.set_logger_dir). In a process that is one
// of several training together with a rank other than 0 (RANK > 0 with WORLD_SIZE > 1, as torchrun
// sets them, or SLURM_PROCID > 0 with SLURM_NTASKS > 1), it only remembers the name: the
// directory, its lock and log.log are the chief's (rank 0's); what follows is the chief's part. First the log.log of a
// previous directory is closed. If `dir` exists and holds an entry whose name does not start with
// `.`, `action` says what to do with it (case-insensitive):
//   'k' keep it as it is;
//   'd' delete it with everything inside, then start an empty one;
//   'b' back it up: rename it to `<dir>.<MMDD-HHMMSS>`, then start an empty `dir`;
//   'n' leave it alone and use a new directory `<dir>.<MMDD-HHMMSS>` instead;
//   'q' quit: throw std::runtime_error.
// With no action: if stdin is a terminal, ask (tensorpack's prompt, repeated until an answer;
// an answer other than k, d, b, n quits); otherwise throw std::invalid_argument naming the
// directory. An empty or missing directory needs no action. Then: `mkdir -p`; a log.log kept
// with 'k' is renamed to `log.log.<MMDD-HHMMSS>` (logged); a new log.log is opened and receives
// every later line, starting with `Argv: ...`. log.log is created no more readable than the
// directory (read for the group or others only where the directory lets them in). Then the
// temporary files that killed processes left in the directory are removed
// (remove_stale_temporary_files, trainpack/utils/atomic_file.h), each one logged. Before it
// opens anything, set_logger_dir calls protect_process_io() (trainpack/utils/process_io.h).
// A log directory is owned by one run (process) at a time: set_logger_dir takes exclusive locks,
// flock on the directory itself and on `<dir>/.trainpack.lock` (a hidden file holding the owner's
// process id and start time), and holds them until the logger directory changes,
// unset_logger_dir, or the process ends (the kernel releases them however the process dies).
// Deleting the lock file releases nothing: the directory's lock still holds (where the file system
// cannot lock a directory, a warning says that the file alone guards it). When another process holds it,
// set_logger_dir throws std::runtime_error "log directory D is in use by process 1234 (since
// ...); wait for it to finish or use another directory", before log.log is touched. 'b' and 'd'
// first take the lock of the existing directory: one that another run holds is never moved or
// deleted. They refuse (std::runtime_error) a directory that is `/` or holds the current working
// directory (`set_logger_dir(".", 'b')`), which cannot be moved or deleted.
// Errors (a directory or file that cannot be created, deleted or renamed) throw
// std::runtime_error naming the path and the reason. If set_logger_dir throws before touching
// the file system (an unknown action, 'q', no action without a terminal), the previous logger
// directory and its log.log stay as they were; if it fails later, no directory is set.
void set_logger_dir(const std::string& dir, std::optional<char> action = std::nullopt);
// The same with the action as a string of one character ("" means no action).
void set_logger_dir(const std::string& dir, const std::string& action);

// set_logger_dir("train_log/<program>" [+ ":<name>"], action), where <program> is the base name
// of the running program without its extension (tensorpack uses the main script's name).
void auto_set_dir(std::optional<char> action = std::nullopt, const std::string& name = "");

// Forgets the logger directory and closes its log.log (files already written stay).
void unset_logger_dir();

}  // namespace logger
}  // namespace trainpack

#define TP_LOG_AT(tp_level_, ...)                                                        \
  do {                                                                                   \
    if (static_cast<int>(tp_level_) >= static_cast<int>(::trainpack::logger::level()))   \
      ::trainpack::logger::log(tp_level_, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
#define TP_LOG_DEBUG(...) TP_LOG_AT(::trainpack::logger::Level::kDebug, __VA_ARGS__)
#define TP_LOG_INFO(...) TP_LOG_AT(::trainpack::logger::Level::kInfo, __VA_ARGS__)
#define TP_LOG_WARN(...) TP_LOG_AT(::trainpack::logger::Level::kWarning, __VA_ARGS__)
#define TP_LOG_ERROR(...) TP_LOG_AT(::trainpack::logger::Level::kError, __VA_ARGS__)
