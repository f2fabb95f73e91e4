// Fuzzes stats.json's tolerant reader (parse_stats_file), documented never to throw for bad
// input, and the writer on what it accepted: formatting the entries it returns must work.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainpack/utils/stats_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const trainpack::ParsedStats parsed = trainpack::parse_stats_file(text);
  if (parsed.status == trainpack::ParsedStats::Status::kMalformed && !parsed.entries.empty()) {
    __builtin_trap();  // documented: a malformed file yields no entries
  }
  (void)trainpack::format_stats_file(parsed.entries);
  return 0;
}
