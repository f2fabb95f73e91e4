// The logger: tensorpack's console format, `[MMDD HH:MM:SS @file:line] message`.
//
// Lines go to stdout (as tensorpack's handler does); WARNING and ERROR lines carry a `WRN ` or
// `ERR ` tag. Colour is used only when stdout is a terminal. Use the TP_LOG_* macros, which take
// an fmt format string and record the caller's file and line.
//
// Differences from tensorpack: none in the line format. The log directory functions
// (set_logger_dir with its actions, log.log) are completed by the logging issue; for now
// set_logger_dir creates the directory and remembers it.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace trainpack {
namespace logger {

enum class Level { kDebug = 10, kInfo = 20, kWarning = 30, kError = 40 };

// Writes one line at `level`, attributed to `file:line` (only the base name of `file` is shown).
void log(Level level, const char* file, int line, std::string_view message);

// Lines below `level` are dropped. Default: kInfo.
void set_level(Level level);
Level level();

// A sink receives every line that passes the level filter, besides stdout; tests use it to read
// what was logged. Returns an id for remove_sink. Sinks run under the logger's lock: a sink must
// not log, nor add or remove sinks.
using Sink = std::function<void(Level, std::string_view message)>;
int add_sink(Sink sink);
void remove_sink(int id);

// The directory that callbacks write into, or nullopt when none was set.
std::optional<std::string> get_logger_dir();
// Creates `dir` (with parents) and makes it the logger directory.
void set_logger_dir(const std::string& dir);
// Forgets the logger directory (files already written stay).
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
