// The stats.json format on its own (trainpack/utils/stats_json.h): what parse_stats_file reports
// for valid, truncated and malformed texts, and that it reads back what the format functions
// write. The byte-for-byte layout is tested through JSONWriter in json_writer_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "trainpack/utils/stats_json.h"

namespace trainpack {
namespace stats_json_test {

TEST(StatsJson, ParsesAValidFile) {
  const std::string text = R"([{"a": 0.5, "epoch_num": 1}, {"b": NaN, "epoch_num": 2}])";
  const ParsedStats p = parse_stats_file(text);
  EXPECT_EQ(p.status, ParsedStats::Status::kValid);
  EXPECT_EQ(p.bytes_ignored, 0u);
  EXPECT_TRUE(p.message.empty());
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(format_stats_file(p.entries), text);
  EXPECT_EQ(format_stats_entry(p.entries[0]), R"({"a": 0.5, "epoch_num": 1})");
  EXPECT_EQ(format_stat_value(*p.entries[1].find("epoch_num")), "2");
}

TEST(StatsJson, KeepsTheCompleteEntriesOfATruncatedText) {
  const ParsedStats p = parse_stats_file(R"([{"a": 1}, {"b": 2)");
  EXPECT_EQ(p.status, ParsedStats::Status::kTruncated);
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.bytes_ignored, 9u);  // `, {"b": 2`
  // NUL bytes (what a power loss leaves) after the closing bracket: every entry, the rest
  // ignored. White space alone there is valid.
  const ParsedStats nul = parse_stats_file(std::string("[{\"a\": 1}]\n") + std::string(3, '\0'));
  EXPECT_EQ(nul.status, ParsedStats::Status::kTruncated);
  EXPECT_EQ(nul.entries.size(), 1u);
  EXPECT_EQ(nul.bytes_ignored, 4u);
  EXPECT_EQ(parse_stats_file("[{\"a\": 1}]\n").status, ParsedStats::Status::kValid);
}

TEST(StatsJson, ReportsAMalformedText) {
  const ParsedStats p = parse_stats_file(R"([{"a": 1}, 5])");
  EXPECT_EQ(p.status, ParsedStats::Status::kMalformed);
  EXPECT_TRUE(p.entries.empty());
  EXPECT_EQ(p.message, "entry 1 is not a JSON object");
  EXPECT_EQ(parse_stats_file("").message, "the file is empty");
}

}  // namespace stats_json_test
}  // namespace trainpack
