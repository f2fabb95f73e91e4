// SessionRunTimeout in a real process (tests/callbacks/timeout_child): a step that never returns
// ends the process with exit code 124, the message in log.log and in TORCHELASTIC_ERROR_FILE.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "distributed/worker_process.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/session_run_timeout.h"

namespace trainpack {
namespace session_run_timeout_process_test {

using ::testing::ContainsRegex;
using ::testing::MatchesRegex;

using SessionRunTimeoutProcessTest = testing::TempDirTest;

// A step that blocks forever in a real process: the watchdog logs the message into log.log,
// writes it into TORCHELASTIC_ERROR_FILE and ends the process with 124, within timeout + grace
// (0.3 s) plus a generous slack.
TEST_F(SessionRunTimeoutProcessTest, AHungStepEndsTheProcessWithTheMessageInTheLogAndErrorFile) {
  const std::filesystem::path logdir = path("log");
  const std::filesystem::path error_file = path("error.json");
  testing::WorkerProcess child(TRAINPACK_TIMEOUT_CHILD, {logdir.string(), "100", "200", "2"},
                               {{"TORCHELASTIC_ERROR_FILE", error_file.string()}},
                               path("stderr.txt"));
  ASSERT_TRUE(child.wait_line("hanging at global_step 2", 60)) << child.describe();
  EXPECT_EQ(child.wait_exit(60), SessionRunTimeout::kExitCode) << child.describe();

  const std::string expected =
      "Training failed at global_step=2 \\(the step has run for [0-9]+ ms without returning, "
      "more than timeout_in_ms=100 plus grace_period=200 ms\\); ending the process with exit "
      "code 124";
  const std::string log = testing::read_text(logdir / "log.log");
  EXPECT_THAT(log, ContainsRegex("ERR \\[SessionRunTimeout\\] " + expected)) << log;

  const auto json = nlohmann::json::parse(testing::read_text(error_file));
  ASSERT_TRUE(json.contains("message") && json.contains("timestamp")) << json.dump();
  EXPECT_THAT(json["message"].get<std::string>(), MatchesRegex("SessionRunTimeout: " + expected));
  EXPECT_GT(std::stoll(json["timestamp"].get<std::string>()), 1600000000);
}

}  // namespace session_run_timeout_process_test
}  // namespace trainpack
