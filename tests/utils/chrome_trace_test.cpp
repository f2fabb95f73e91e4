// ChromeTrace (the Trace Event Format writer), the operator table, and the strict format check of
// tests/support/trace_event_format.h that the GraphProfiler tests rely on.
#include "trainpack/utils/chrome_trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/trace_event_format.h"

namespace trainpack {
namespace chrome_trace_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::trace_event_format_problems;

// A call from `start` for `duration` nanoseconds.
TraceEvent call(std::string name, int64_t start, int64_t duration, uint64_t thread = 7) {
  TraceEvent e;
  e.name = std::move(name);
  e.start_ns = start;
  e.duration_ns = duration;
  e.thread = thread;
  return e;
}

TEST(ChromeTrace, WritesMetadataAndCompleteEventsWithSmallTids) {
  // Thread ids as a profiler may give them: the second does not fit 32 bits.
  const uint64_t big = 0x7f12345678ull;
  TraceEvent addmm = call("aten::addmm", 5250, 10001, big);
  addmm.input_shapes = {{3}, {2, 4}, {4, 3}, {}, {}};
  addmm.input_types = {"float", "float", "float", "Scalar", "Scalar"};
  ChromeTrace trace({addmm, call("aten::t", 0, 3000, 7)},
                    ChromeTraceOptions()
                        .process_name("job")
                        .thread_names({{7, "training thread"}})
                        .other_data({{"global_step", 12}}));
  EXPECT_EQ(trace.tid(7), 1);
  EXPECT_EQ(trace.tid(big), 2);
  EXPECT_EQ(trace.tid(99), 0);
  EXPECT_EQ(
      trace.json(),
      R"({"traceEvents":[)"
      R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"job"}},)"
      R"({"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"training thread"}},)"
      R"({"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"thread 545766266488"}},)"
      R"({"name":"aten::t","cat":"cpu_op","ph":"X","ts":0.0,"dur":3.0,"pid":1,"tid":1,"args":{}},)"
      R"({"name":"aten::addmm","cat":"cpu_op","ph":"X","ts":5.25,"dur":10.001,"pid":1,"tid":2,)"
      R"("args":{"Input Dims":[[3],[2,4],[4,3],[],[]],)"
      R"("Input type":["float","float","float","Scalar","Scalar"]}}],)"
      R"("displayTimeUnit":"ms","otherData":{"global_step":12}})");
  EXPECT_THAT(trace_event_format_problems(trace.json()), ElementsAre());
}

TEST(ChromeTrace, OrdersEachThreadByStartWithTheEnclosingCallFirst) {
  // As a profiler lists them: by end, children first.
  ChromeTrace trace({call("child", 2, 3), call("other", 10, 1), call("parent", 2, 6)});
  ASSERT_EQ(trace.events().size(), 3u);
  EXPECT_EQ(trace.events()[0].name, "parent");
  EXPECT_EQ(trace.events()[1].name, "child");
  EXPECT_EQ(trace.events()[2].name, "other");
  EXPECT_THAT(trace_event_format_problems(trace.json()), ElementsAre());
}

TEST(ChromeTrace, CutsACallThatOutlastsItsParentByARounding) {
  // parent 0..10, child 9..11: a rounding of the profiler's times can make a child end after
  // its parent.
  ChromeTrace trace({call("parent", 0, 10), call("child", 9, 2), call("next", 10, 4)});
  ASSERT_EQ(trace.events().size(), 3u);
  EXPECT_EQ(trace.events()[1].name, "child");
  EXPECT_EQ(trace.events()[1].duration_ns, 1);
  EXPECT_EQ(trace.events()[2].duration_ns, 4);  // starts as the parent ends: not nested, not cut
  EXPECT_THAT(trace_event_format_problems(trace.json()), ElementsAre());
}

TEST(ChromeTrace, NegativeTimesAreRefusedNamingTheEvent) {
  try {
    ChromeTrace trace({call("aten::mm", -1, 2)});
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("ChromeTrace: event 'aten::mm' has a negative start"));
  }
}

TEST(ChromeTrace, OperatorTableCountsSelfAndTotalTime) {
  // linear 0..100 { addmm 10..60 { copy_ 20..30 }, t 70..75 }, addmm 200..240, on one thread;
  // t 0..8 on another.
  ChromeTrace trace({call("linear", 0, 100), call("addmm", 10, 50), call("copy_", 20, 10),
                     call("t", 70, 5), call("addmm", 200, 40), call("t", 0, 8, 8)});
  const auto table = trace.operator_table();
  ASSERT_EQ(table.size(), 4u);
  EXPECT_EQ(table[0].name, "addmm");  // self 40 + 40
  EXPECT_EQ(table[0].calls, 2);
  EXPECT_EQ(table[0].self_ns, 80);
  EXPECT_EQ(table[0].total_ns, 90);
  EXPECT_EQ(table[1].name, "linear");  // 100 - 50 - 5
  EXPECT_EQ(table[1].self_ns, 45);
  EXPECT_EQ(table[1].total_ns, 100);
  EXPECT_EQ(table[2].name, "t");
  EXPECT_EQ(table[2].calls, 2);
  EXPECT_EQ(table[2].self_ns, 13);
  EXPECT_EQ(table[3].name, "copy_");
  EXPECT_EQ(table[3].self_ns, 10);
}

TEST(ChromeTrace, MarkdownTableShowsTheFirstRowsAndSumsTheRest) {
  const std::vector<OperatorStats> table{{"aten::addmm", 2, 600040, 700000},
                                         {"a|b", 1, 300000, 300000},
                                         {"aten::t", 4, 99960, 150000}};
  EXPECT_EQ(operator_table_markdown(table, 2),
            "| Operator | Calls | Self (us) | Self % | Total (us) |\n"
            "|:--|--:|--:|--:|--:|\n"
            "| aten::addmm | 2 | 600.0 | 60.0 | 700.0 |\n"
            "| a\\|b | 1 | 300.0 | 30.0 | 300.0 |\n"
            "\n1 more operators: 100.0 us of self time (10.0%).\n");
  EXPECT_EQ(operator_table_markdown(table, 3).find("more operators"), std::string::npos);
}

TEST(ChromeTrace, CsvQuotesNamesThatNeedIt) {
  EXPECT_EQ(operator_table_csv({{"aten::addmm", 2, 600040, 700000}, {"f(a, \"b\")", 1, 3, 4}}),
            "operator,calls,self_us,total_us\n"
            "aten::addmm,2,600.040,700.000\n"
            "\"f(a, \"\"b\"\")\",1,0.003,0.004\n");
}

// The checker itself: each rule catches what it is for.
TEST(TraceEventFormatCheck, CatchesWhatViewersReject) {
  const std::string head =
      R"({"traceEvents":[{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"p"}},)"
      R"({"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"t"}},)";
  const auto check = [&](const std::string& events) {
    return trace_event_format_problems(head + events + "]}");
  };
  EXPECT_THAT(check(R"({"name":"a","cat":"c","ph":"X","ts":0,"dur":5,"pid":1,"tid":1})"),
              ElementsAre());
  EXPECT_THAT(check(R"({"name":"a","cat":"c","ph":"X","ts":0,"dur":5,"pid":1,"tid":4294967297})"),
              ElementsAre(HasSubstr("\"tid\" that is an integer fitting 32 bits")));
  EXPECT_THAT(check(R"({"name":"a","cat":"c","ph":"X","ts":0,"dur":5,"pid":1,"tid":2})"),
              ElementsAre("pid 1 tid 2 has no thread_name"));
  EXPECT_THAT(check(R"({"name":"a","cat":"c","ph":"X","ts":4,"dur":1,"pid":1,"tid":1},)"
                    R"({"name":"b","cat":"c","ph":"X","ts":3,"dur":1,"pid":1,"tid":1})"),
              ElementsAre(HasSubstr("before the previous event")));
  EXPECT_THAT(check(R"({"name":"a","cat":"c","ph":"X","ts":0,"dur":5,"pid":1,"tid":1},)"
                    R"({"name":"b","cat":"c","ph":"X","ts":4,"dur":2,"pid":1,"tid":1})"),
              ElementsAre(HasSubstr("overlaps the end of its enclosing event at 5000 ns")));
  EXPECT_THAT(check(R"({"name":"a","cat":"c","ph":"X","ts":0.5,"dur":4.5,"pid":1,"tid":1},)"
                    R"({"name":"b","cat":"c","ph":"X","ts":4.999,"dur":0.002,"pid":1,"tid":1})"),
              ElementsAre(HasSubstr("spans 4999..5001 ns and overlaps the end of its enclosing "
                                    "event at 5000 ns")));
  EXPECT_THAT(check(R"({"name":"a","cat":"c","ph":"X","ts":-1,"dur":5,"pid":1,"tid":1})"),
              ElementsAre(HasSubstr("\"ts\" that is a number >= 0")));
  EXPECT_THAT(check(R"({"name":"a","ph":"X","ts":0,"dur":5,"pid":1,"tid":1})"),
              ElementsAre(HasSubstr("no string \"cat\"")));
  EXPECT_THAT(check(R"({"name":"a","cat":"c","ph":"B","ts":0,"pid":1,"tid":1})"),
              ElementsAre(HasSubstr("only X and M are expected")));
  EXPECT_THAT(trace_event_format_problems("[]"), ElementsAre("the top level is not an object"));
  EXPECT_THAT(trace_event_format_problems("{\"traceEvents\":"), ElementsAre(HasSubstr("not JSON")));
}

}  // namespace chrome_trace_test
}  // namespace trainpack
