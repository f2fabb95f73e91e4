// Human-readable durations, as tensorpack's `humanize_time_delta` prints them in its log lines
// (`Epoch 1 (global_step 100) finished, time:1 minute 27 seconds.`).
#pragma once

#include <string>

namespace trainpack {

// `0` -> "0 second", `2.5` -> "2.5 seconds", `87.6` -> "1 minute 27 seconds",
// `86400 + 9 * 3600 + 123` -> "1 day 9 hours 2 minutes 3 seconds". Below a minute the fraction is
// kept; above it, seconds are whole. A negative value logs a warning and prints "{:.3g} seconds".
std::string humanize_time_delta(double seconds);

// Python's `"{:.Ng}".format(v)` for the given precision (used by the log lines that tensorpack
// formats with `.3g`, `.5g`, `.7g`).
std::string format_g(double value, int precision);

}  // namespace trainpack
