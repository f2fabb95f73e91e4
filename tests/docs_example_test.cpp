// The "Testing a callback" example of docs/callbacks.md, as it is written there: a user's callback
// and its test, with trainpack/trainpack.h and trainpack/testing.h only. The last test checks
// that the page still shows this file.
#include <gtest/gtest.h>
#include <trainpack/testing.h>
#include <trainpack/trainpack.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace docs_example_test {

class StepTime : public trainpack::Callback {
 public:
  StepTime(int every, trainpack::Clock clock) : every_(every), clock_(std::move(clock)) {}
  std::vector<double> logged;

 protected:
  void _before_epoch() override { start_ = clock_(); }
  void _trigger_epoch() override {
    if (epoch_num() % every_ != 0) return;
    logged.push_back((clock_() - start_) / trainer().steps_per_epoch());
    TP_LOG_INFO("[StepTime] {:.2f} s per step", logged.back());
  }

 private:
  int every_;
  trainpack::Clock clock_;
  double start_ = 0;
};

TEST(StepTime, LogsTheMeanStepTimeEverySecondEpoch) {
  using namespace trainpack::testing;
  FakeClock clock;
  auto tick = std::make_shared<ActionCallback>();
  tick->trigger_step_fn = [&](ActionCallback&) { clock.advance(0.5); };
  auto step_time = std::make_shared<StepTime>(2, clock);
  auto trace = std::make_shared<Trace>();
  LogCapture log;
  run_noop({tick, step_time, std::make_shared<TraceCallback>(trace)},
           /*steps_per_epoch=*/4, /*starting_epoch=*/1, /*max_epoch=*/4);
  EXPECT_EQ(step_time->logged, (std::vector<double>{0.5, 0.5}));  // after epochs 2 and 4
  EXPECT_TRUE(log.contains("[StepTime] 0.50 s per step"));
  EXPECT_EQ(trace->back(), "after_train ep=4 ls=3 gs=16");
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The page's code block is this file, line for line and in order (blank lines aside; the
// #include lines in any order, since clang-format sorts them here).
TEST(DocsExample, CallbacksMdShowsThisTest) {
  const std::filesystem::path root = std::filesystem::path(TRAINPACK_INCLUDE_DIR).parent_path();
  const std::string page = read_text(root / "docs" / "callbacks.md");
  const size_t section = page.find("## Testing a callback");
  ASSERT_NE(section, std::string::npos);
  const size_t begin = page.find("```cpp\n", section);
  ASSERT_NE(begin, std::string::npos);
  const size_t end = page.find("```", begin + 7);
  ASSERT_NE(end, std::string::npos);
  const std::vector<std::string> shown = lines_of(page.substr(begin + 7, end - begin - 7));
  const std::vector<std::string> here =
      lines_of(read_text(root / "tests" / "docs_example_test.cpp"));
  ASSERT_GT(shown.size(), 30u);
  auto at = here.begin();
  for (const auto& line : shown) {
    if (line.empty()) continue;
    if (line.rfind("#include", 0) == 0) {
      EXPECT_NE(std::find(here.begin(), here.end(), line), here.end()) << line;
      continue;
    }
    at = std::find(at, here.end(), line);
    ASSERT_NE(at, here.end()) << "docs/callbacks.md shows a line this test does not have (or not "
                                 "in this order): "
                              << line;
    ++at;
  }
}

}  // namespace docs_example_test
