// Clocks for the time-based callbacks (ThroughputTracker, EstimatedTimeLeft, ProgressBar,
// ModelSaver): each takes an optional `Clock`, seconds from any fixed point, so that a test can
// drive time by hand (trainpack/testing.h's FakeClock) instead of sleeping.
#pragma once

#include <functional>

namespace trainpack {

// Seconds from a fixed point. An empty Clock means the callback's default (below).
using Clock = std::function<double()>;

// Seconds of std::chrono::steady_clock: for durations (never jumps).
double monotonic_seconds();
// Seconds since the Unix epoch (std::chrono::system_clock): for times written into files.
double wall_seconds();

// `clock()` when set, else `fallback()`.
inline double read_clock(const Clock& clock, double (*fallback)()) {
  return clock ? clock() : fallback();
}

}  // namespace trainpack
