#include "trainpack/utils/humanize.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "trainpack/utils/logger.h"

namespace trainpack {

std::string format_g(double value, int precision) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, value);
  return buf;
}

std::string humanize_time_delta(double sec) {
  if (sec < 0) {
    TP_LOG_WARN("humanize_time_delta() obtains negative seconds!");
    return format_g(sec, 3) + " seconds";
  }
  if (sec == 0) return "0 second";
  const long long whole = static_cast<long long>(sec);
  const double days = std::floor(sec / 86400);
  const long long hours = (whole % 86400) / 3600;
  const long long minutes = (whole % 3600) / 60;
  const double seconds = sec < 60 ? sec : static_cast<double>(whole % 60);
  struct Part {
    double value;
    const char* unit;
  };
  const Part parts[] = {{days, "day"},
                        {static_cast<double>(hours), "hour"},
                        {static_cast<double>(minutes), "minute"},
                        {seconds, "second"}};
  std::string out;
  for (const Part& p : parts) {
    if (p.value <= 0) continue;
    if (!out.empty()) out += ' ';
    out += format_g(p.value, 3) + " " + p.unit;
    if (p.value > 1) out += 's';
  }
  return out;
}

}  // namespace trainpack
