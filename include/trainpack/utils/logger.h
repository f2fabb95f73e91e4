// The logger (tensorpack's `logger` module): tensorpack's line, `[MMDD HH:MM:SS @file:line]
// message`, on stdout, with a `WRN `, `ERR ` or `DBG ` tag (in colour only when stdout is a
// terminal), and the log directory that callbacks write into. Log with the TP_LOG_* macros (an fmt
// format string; they record the caller's file and line). Once set_logger_dir was called, every
// line also goes, without colour and flushed line by line, to `<dir>/log.log`, which starts with
// `Argv: <the command line>`. More in docs/trainer.md, "Logging".
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

// Makes `dir` the logger directory (tensorpack's logger.set_logger_dir). On a rank other than 0 of
// several (RANK > 0 with WORLD_SIZE > 1, or SLURM_PROCID > 0 with SLURM_NTASKS > 1) it only
// remembers the name. A `dir` that holds entries (other than dot-files) needs an `action`,
// case-insensitive: 'k' keep, 'd' delete and start empty, 'b' rename to `<dir>.<MMDD-HHMMSS>`
// (`-1`, `-2`... if taken) and start empty, 'n' use `<dir>.<MMDD-HHMMSS>` instead, 'q' throw
// std::runtime_error; any other action is std::invalid_argument. No action: tensorpack's prompt
// on a terminal, otherwise std::invalid_argument naming `dir`. Then it creates `dir`, renames a
// kept log.log to `log.log.<MMDD-HHMMSS>`, opens a new one and removes the temporary files of dead
// processes (remove_stale_temporary_files). One process owns the directory at a time (flocks held
// until the directory changes or the process ends): when another holds it, std::runtime_error
// "log directory D is in use by process N (since ...); ...", before anything is touched. 'b' and
// 'd' refuse `/` and a directory holding the working directory. Other errors: std::runtime_error
// naming the path and the reason. A throw before the file system is touched leaves the previous
// directory set; a later one leaves none.
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
