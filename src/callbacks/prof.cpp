#include "trainpack/callbacks/prof.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "trainpack/callbacks/monitor_base.h"
#include "trainpack/train/trainer.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
// ---- ThroughputTracker ----

ThroughputTracker::ThroughputTracker(std::optional<double> samples_per_step, Clock clock)
    : samples_per_step_(samples_per_step), clock_(std::move(clock)) {
  set_chief_only(false);
  if (samples_per_step_ && !(*samples_per_step_ > 0)) {
    throw std::invalid_argument(fmt::format(
        "ThroughputTracker: samples_per_step must be positive, got {}", *samples_per_step_));
  }
}

double ThroughputTracker::timer_seconds() const {
  return accumulated_ + (running_ ? now() - running_since_ : 0.0);
}

void ThroughputTracker::reset_mark() {
  accumulated_ = 0;
  if (running_) running_since_ = now();
  last_step_ = global_step();
}

double ThroughputTracker::now() const { return read_clock(clock_, monotonic_seconds); }

void ThroughputTracker::_before_train() { reset_mark(); }

void ThroughputTracker::_before_epoch() {
  if (running_) return;
  running_ = true;
  running_since_ = now();
}

void ThroughputTracker::_after_epoch() {
  if (!running_) return;
  accumulated_ += now() - running_since_;
  running_ = false;
}

void ThroughputTracker::_trigger() {
  const double seconds = timer_seconds();
  const int64_t steps = global_step() - last_step_;
  reset_mark();
  if (!(seconds > 0)) return;
  const double steps_per_sec = static_cast<double>(steps) / seconds;
  if (samples_per_step_) {
    trainer().monitors().put_scalar("Throughput (samples/sec)", steps_per_sec * *samples_per_step_);
  } else {
    trainer().monitors().put_scalar("Throughput (steps/sec)", steps_per_sec);
  }
}

// ---- HostMemoryTracker ----

std::optional<uint64_t> parse_meminfo_available(std::string_view meminfo) {
  // A line "MemAvailable:   12345678 kB".
  constexpr std::string_view kKey = "MemAvailable:";
  size_t pos = 0;
  while (pos < meminfo.size()) {
    size_t end = meminfo.find('\n', pos);
    if (end == std::string_view::npos) end = meminfo.size();
    const std::string_view line = meminfo.substr(pos, end - pos);
    if (line.substr(0, kKey.size()) == kKey) {
      const std::string rest(line.substr(kKey.size()));
      char* parse_end = nullptr;
      const unsigned long long value = std::strtoull(rest.c_str(), &parse_end, 10);
      if (parse_end == rest.c_str()) return std::nullopt;
      const bool kb = std::string_view(parse_end).find("kB") != std::string_view::npos;
      return static_cast<uint64_t>(value) * (kb ? 1024u : 1u);
    }
    pos = end + 1;
  }
  return std::nullopt;
}

std::optional<uint64_t> host_available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_meminfo_available(text.str());
}

std::optional<double> HostMemoryTracker::available_gb() {
  const auto bytes = host_available_memory_bytes();
  if (!bytes) {
    if (!warned_) {
      TP_LOG_WARN("[HostMemoryTracker] Cannot read MemAvailable from /proc/meminfo; not tracking.");
      warned_ = true;
    }
    return std::nullopt;
  }
  return static_cast<double>(*bytes) / (1024.0 * 1024.0 * 1024.0);
}

void HostMemoryTracker::log_free(const char* where) {
  if (const auto gb = available_gb()) {
    TP_LOG_INFO("[HostMemoryTracker] Free RAM in {} is {:.2f} GB.", where, *gb);
  }
}

void HostMemoryTracker::_setup_graph() { log_free("setup_graph()"); }
void HostMemoryTracker::_before_train() { log_free("before_train()"); }

void HostMemoryTracker::_trigger() {
  if (const auto gb = available_gb()) trainer().monitors().put_scalar("HostFreeMemory (GB)", *gb);
}

}  // namespace trainpack
