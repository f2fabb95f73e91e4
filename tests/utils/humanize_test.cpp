// humanize_time_delta and the Python-style %g formatting.
#include <gtest/gtest.h>

#include <cmath>

#include "trainpack/testing.h"
#include "trainpack/utils/demangle.h"
#include "trainpack/utils/humanize.h"

namespace trainpack {
namespace humanize_test {

TEST(HumanizeTimeDelta, MatchesTensorpacksExamples) {
  EXPECT_EQ(humanize_time_delta(0), "0 second");
  EXPECT_EQ(humanize_time_delta(1), "1 second");
  EXPECT_EQ(humanize_time_delta(0.01), "0.01 second");
  EXPECT_EQ(humanize_time_delta(2.5), "2.5 seconds");
  EXPECT_EQ(humanize_time_delta(59.99), "60 seconds");
  EXPECT_EQ(humanize_time_delta(61), "1 minute 1 second");
  EXPECT_EQ(humanize_time_delta(87.6), "1 minute 27 seconds");
  EXPECT_EQ(humanize_time_delta(60.5), "1 minute");
  EXPECT_EQ(humanize_time_delta(3601), "1 hour 1 second");
  EXPECT_EQ(humanize_time_delta(86401), "1 day 1 second");
  EXPECT_EQ(humanize_time_delta(86400 + 9 * 3600 + 120 + 3), "1 day 9 hours 2 minutes 3 seconds");
}

TEST(HumanizeTimeDelta, NegativeSecondsWarn) {
  testing::LogCapture log;
  EXPECT_EQ(humanize_time_delta(-1.5), "-1.5 seconds");
  EXPECT_TRUE(log.contains("WRN humanize_time_delta() obtains negative seconds!"));
}

TEST(FormatG, MatchesPythonsGFormat) {
  EXPECT_EQ(format_g(0.1, 5), "0.1");
  EXPECT_EQ(format_g(1e-05, 5), "1e-05");
  EXPECT_EQ(format_g(12345.6, 5), "12346");
  EXPECT_EQ(format_g(1e5, 5), "1e+05");
  EXPECT_EQ(format_g(std::nan(""), 5), "nan");
  EXPECT_EQ(format_g(-INFINITY, 5), "-inf");
}

namespace {
namespace inner {
struct Thing {};
template <typename T>
struct Box {};
}  // namespace inner
}  // namespace

TEST(ClassName, DropsNamespacesButKeepsTemplateArguments) {
  EXPECT_EQ(class_name(typeid(inner::Thing)), "Thing");
  EXPECT_EQ(class_name(typeid(inner::Box<inner::Thing>)),
            "Box<trainpack::humanize_test::(anonymous namespace)::inner::Thing>");
}

}  // namespace humanize_test
}  // namespace trainpack
