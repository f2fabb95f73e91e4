#include "trainpack/utils/logger.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <system_error>

namespace trainpack {
namespace logger {
namespace {

struct State {
  std::mutex mutex;
  std::map<int, Sink> sinks;
  int next_sink_id = 0;
  std::optional<std::string> logger_dir;
};

State& state() {
  static State s;
  return s;
}

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};

std::string_view base_name(const char* file) {
  std::string_view path(file);
  auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%m%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace

void log(Level lvl, const char* file, int line, std::string_view message) {
  if (static_cast<int>(lvl) < g_level.load(std::memory_order_relaxed)) return;
  static const bool colour = isatty(STDOUT_FILENO) != 0;
  std::string prefix = fmt::format("[{} @{}:{}]", timestamp(), base_name(file), line);
  const char* tag = "";
  const char* tag_colour = "";
  switch (lvl) {
    case Level::kDebug:
      tag = "DBG ";
      tag_colour = "\033[33m";
      break;
    case Level::kInfo:
      break;
    case Level::kWarning:
      tag = "WRN ";
      tag_colour = "\033[5m\033[31m";
      break;
    case Level::kError:
      tag = "ERR ";
      tag_colour = "\033[4m\033[5m\033[31m";
      break;
  }
  std::string text;
  if (colour) {
    text = fmt::format("\033[32m{}\033[0m {}{}{}{}\n", prefix, tag_colour, tag,
                       *tag ? "\033[0m" : "", message);
  } else {
    text = fmt::format("{} {}{}\n", prefix, tag, message);
  }
  std::lock_guard<std::mutex> lock(state().mutex);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  for (auto& entry : state().sinks) entry.second(lvl, message);
}

void set_level(Level lvl) { g_level.store(static_cast<int>(lvl), std::memory_order_relaxed); }
Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }

int add_sink(Sink sink) {
  std::lock_guard<std::mutex> lock(state().mutex);
  int id = state().next_sink_id++;
  state().sinks.emplace(id, std::move(sink));
  return id;
}

void remove_sink(int id) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().sinks.erase(id);
}

std::optional<std::string> get_logger_dir() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().logger_dir;
}

void set_logger_dir(const std::string& dir) {
  if (dir.empty())
    throw std::invalid_argument("logger::set_logger_dir: the directory name is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw std::runtime_error(
        fmt::format("logger::set_logger_dir: cannot create '{}': {}", dir, ec.message()));
  }
  std::lock_guard<std::mutex> lock(state().mutex);
  state().logger_dir = std::filesystem::path(dir).lexically_normal().string();
}

void unset_logger_dir() {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().logger_dir.reset();
}

}  // namespace logger
}  // namespace trainpack
