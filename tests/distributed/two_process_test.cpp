// Data-parallel training with two processes on 127.0.0.1 (docs/distributed.md): each test runs
// two trainpack_dp_worker ranks (tests/distributed/dp_worker/main.cpp) at a free port and checks
// what they end with, what they print and what they write. Every wait is bounded. The variants
// marked long run only with TRAINPACK_DISTRIBUTED_LONG=1.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/worker_process.h"
#include "support/sanitizers.h"
#include "support/temp_dir.h"

namespace trainpack {
namespace two_process_test {

namespace fs = std::filesystem;
using testing::read_text;
using testing::SteadyClock;
using testing::WorkerPair;
using testing::WorkerProcess;

constexpr double kRunSeconds = 60;  // the hard limit of any one worker process

bool long_tests() {
  const char* v = std::getenv("TRAINPACK_DISTRIBUTED_LONG");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

class TwoProcessTest : public testing::TempDirFixture<> {
 protected:
  void SetUp() override {
    testing::TempDirFixture<>::SetUp();
    TRAINPACK_SKIP_UNDER_TSAN();
    TRAINPACK_SKIP_WITHOUT_GLOO();
  }

 protected:
  std::string path(const std::string& name) const { return (dir() / name).string(); }

  // Both ranks with the same arguments after <out file> (rank r writes `<prefix>.<r>`).
  std::unique_ptr<WorkerPair> start(const std::string& prefix,
                                    const std::vector<std::string>& args0,
                                    const std::vector<std::string>& args1,
                                    const std::map<std::string, std::string> (&env)[2] = {{}, {}}) {
    std::vector<std::string> a0{path(prefix + ".0")}, a1{path(prefix + ".1")};
    a0.insert(a0.end(), args0.begin(), args0.end());
    a1.insert(a1.end(), args1.begin(), args1.end());
    const fs::path logs = dir() / (prefix + ".logs");
    fs::create_directories(logs);
    const std::vector<std::string> args[2] = {a0, a1};
    return std::make_unique<WorkerPair>(TRAINPACK_DP_WORKER, logs, args, env);
  }

  // Runs a pair to its end; expects both to exit 0. The parameters of rank 0 (== rank 1's).
  std::string run_pair(const std::string& prefix, const std::vector<std::string>& args = {}) {
    auto pair = start(prefix, args, args);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ((*pair)[r].wait_exit(kRunSeconds), 0)
          << "rank " << r << " " << (*pair)[r].describe();
    }
    const std::string p0 = read_text(path(prefix + ".0")), p1 = read_text(path(prefix + ".1"));
    EXPECT_FALSE(p0.empty());
    EXPECT_TRUE(p0 == p1) << "the ranks' parameters differ";
    return p0;
  }

  // A pair resumed from the logger directories `dir0` (the chief's) and `dir1`, to the end.
  // Checks where both continue (the chief's counters, broadcast) and returns the parameters.
  std::string resume_pair(const std::string& prefix, const std::string& dir0,
                          const std::string& dir1, int64_t expected_start_step) {
    auto pair = start(prefix, {"--logdir", dir0}, {"--logdir", dir1});
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ((*pair)[r].wait_exit(kRunSeconds), 0)
          << "rank " << r << " " << (*pair)[r].describe();
      // Rank 1 found no checkpoint in its own directory: its start is the chief's, broadcast.
      EXPECT_EQ((*pair)[r].line("start "),
                fmt::format("start {} {} {}", expected_start_step, expected_start_step / 6 + 1,
                            expected_start_step % 6))
          << "rank " << r;
      EXPECT_EQ((*pair)[r].line("end "), "end 18 0") << "rank " << r;
    }
    const std::string p0 = read_text(path(prefix + ".0")), p1 = read_text(path(prefix + ".1"));
    EXPECT_TRUE(p0 == p1) << "the ranks' parameters differ after resuming";
    return p0;
  }

  static std::vector<float> floats(const std::string& bytes) {
    std::vector<float> out(bytes.size() / sizeof(float));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
    return out;
  }
};

// The same global batches in one process and in two: after 18 steps of SGD with momentum, the
// parameters of the two ranks are bitwise equal (both apply the same averaged gradient), and equal
// to the single process's up to float rounding (the average of two half-batch gradients is
// summed in another order than one full-batch gradient). The model has no batch norm on purpose:
// a batch norm normalises each rank's half batch with that half's own statistics, so two ranks
// would compute another function than one process on the full batch.
TEST_F(TwoProcessTest, ParametersEqualAcrossRanksAndToOneProcess) {
  const std::string two = run_pair("two");
  WorkerProcess one(TRAINPACK_DP_WORKER, {path("one")}, {}, dir() / "one.err");
  ASSERT_EQ(one.wait_exit(kRunSeconds), 0) << one.describe();
  const std::vector<float> a = floats(two), b = floats(read_text(path("one")));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), 3u * 16 + 16 + 16 + 1);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  EXPECT_LT(worst, 1e-5);
}

// Gradient accumulation under data-parallel training: 2 ranks accumulating 2 micro-batches of a
// global 16 per step train, up to float rounding, as one process on global batches of 32 (the
// same 32 points per step), and both ranks end with bitwise the same parameters (the last
// micro-batch's backward all-reduced the sums). Between the micro-batches the gradients are still
// each rank's own: the first micro-batch's backward did not all-reduce (DDP's no_sync()).
TEST_F(TwoProcessTest, AccumulationAllReducesOnlyOnTheLastMicroBatch) {
  const std::string two = run_pair("acc", {"16", "2", "3", "--accumulate", "2"});
  WorkerProcess one(TRAINPACK_DP_WORKER, {path("one"), "32", "2", "3"}, {}, dir() / "one.err");
  ASSERT_EQ(one.wait_exit(kRunSeconds), 0) << one.describe();
  const std::vector<float> a = floats(two), b = floats(read_text(path("one")));
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  EXPECT_LT(worst, 1e-5);
  // 6 steps, one look each (before the second micro-batch) at fc1's 16 x 3 gradient.
  const std::vector<float> g0 = floats(read_text(path("acc.0.micro_grads")));
  const std::vector<float> g1 = floats(read_text(path("acc.1.micro_grads")));
  ASSERT_EQ(g0.size(), 6u * 48);
  ASSERT_EQ(g1.size(), g0.size());
  for (size_t step = 0; step < 6; ++step) {
    const std::vector<float> r0(g0.begin() + step * 48, g0.begin() + (step + 1) * 48);
    const std::vector<float> r1(g1.begin() + step * 48, g1.begin() + (step + 1) * 48);
    EXPECT_NE(r0, r1) << "after the first micro-batch of step " << step
                      << " the ranks' gradients were already all-reduced";
  }
}

// A batch norm's buffers (running mean and variance, the batch count) are the chief's at every
// forward on every rank: DataParallelTrainer broadcasts them before each forward, as
// DistributedDataParallel does by default. The worker records them as each forward sees them.
TEST_F(TwoProcessTest, BatchNormBuffersBroadcastFromTheChief) {
  run_pair("bn", {"16", "2", "6", "--bn"});
  const std::string b0 = read_text(path("bn.0.buffers")), b1 = read_text(path("bn.1.buffers"));
  // 12 forwards of 16 + 16 floats and one int64 each.
  ASSERT_EQ(b0.size(), 12u * (32 * sizeof(float) + sizeof(int64_t)));
  EXPECT_TRUE(b0 == b1) << "a forward saw other buffers on rank 1 than on rank 0";
  // Not vacuous: the running statistics moved between the first forward and the last.
  const size_t per = 32 * sizeof(float) + sizeof(int64_t);
  EXPECT_NE(b0.substr(0, per), b0.substr(11 * per, per));
}

// Monitors, checkpoints and log.log are the chief's; rank 1 logs only warnings and errors, each
// prefixed "rank 1: ". Rank 1 is given its own logger directory so that anything it wrote would
// show: it must stay empty.
TEST_F(TwoProcessTest, OnlyTheChiefWritesFilesAndRank1LogsOnlyWarnings) {
  const std::string d0 = path("run0"), d1 = path("run1");
  auto pair = start("chief", {"16", "1", "4", "--logdir", d0}, {"16", "1", "4", "--logdir", d1});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ((*pair)[r].wait_exit(kRunSeconds), 0) << "rank " << r << " " << (*pair)[r].describe();
  }
  EXPECT_TRUE(fs::exists(fs::path(d0) / "log.log"));
  EXPECT_TRUE(fs::exists(fs::path(d0) / "stats.json"));
  EXPECT_TRUE(fs::exists(fs::path(d0) / "checkpoint"));
  bool events = false;
  for (const auto& e : fs::directory_iterator(d0)) {
    events = events || e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(events) << "no event file in the chief's directory";
  // ModelSaver's constructor creates its directory (as tensorpack's does), before the trainer
  // skips it on rank 1: an empty directory may be there, but nothing in it.
  EXPECT_TRUE(!fs::exists(d1) || fs::is_empty(d1)) << "rank 1 wrote into its logger directory";

  const std::string err1 = (*pair)[1].err();
  const std::regex log_line(R"(^\[\d{4} \d\d:\d\d:\d\d @[^\]]*\] (.*)$)");
  std::istringstream in(err1);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, log_line)) continue;
    const std::string msg = m[1];
    EXPECT_TRUE(msg.rfind("WRN rank 1: ", 0) == 0 || msg.rfind("ERR rank 1: ", 0) == 0)
        << "rank 1 logged: " << line;
  }
  // Its chief-only callbacks are skipped by design: an INFO line, which rank 1 does not log.
  EXPECT_EQ(err1.find("chief-only, skipped"), std::string::npos) << err1;
  EXPECT_NE((*pair)[0].err().find("[DataParallelTrainer] rank 0 of 2"), std::string::npos);
  EXPECT_EQ(read_text(fs::path(d0) / "log.log").find("rank 1: "), std::string::npos);
  // The progress bar (a default callback, not chief-only) is drawn by the chief alone.
  EXPECT_NE((*pair)[0].err().find("it/s"), std::string::npos) << "the chief drew no progress bar";
  EXPECT_EQ(err1.find("it/s"), std::string::npos) << "rank 1 drew a progress bar: " << err1;
}

// A StopTraining that a callback throws on rank 1 alone (in trigger_step of step 5) stops both
// ranks at the same step boundary; the chief's checkpoint of step 5 is auto-resumed (counters and
// input position broadcast to rank 1, whose own directory is empty), and the run ends bitwise
// equal to one never interrupted.
TEST_F(TwoProcessTest, StopTrainingOnOneRankStopsBothAndResumesExactly) {
  const std::string whole = run_pair("whole");
  const std::string d0 = path("run0"), d1 = path("run1");
  auto pair =
      start("stop", {"--logdir", d0}, {"--logdir", d1, "--only-rank", "1", "--stop-at", "5"});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ((*pair)[r].wait_exit(kRunSeconds), 0) << "rank " << r << " " << (*pair)[r].describe();
    EXPECT_EQ((*pair)[r].line("end "), "end 5 0") << "rank " << r;
  }
  EXPECT_TRUE(fs::exists(fs::path(d0) / "model-5.data"));
  EXPECT_TRUE(resume_pair("resumed", d0, d1, 5) == whole)
      << "the resumed run ended with other parameters than the uninterrupted one";
}

// SIGTERM, as torchrun forwards it, to both ranks, to rank 1 only, or (long) to rank 0 only:
// every rank stops at the boundary after step 5 (each prints its stop step), exits 143, the chief
// saved the checkpoint of step 5, and a resume ends as the uninterrupted run.
class SigtermTest : public TwoProcessTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(SigtermTest, AllRanksStopAtOneBoundaryTheChiefSavesAndAResumeContinuesExactly) {
  const std::string who = GetParam();
  if (who == "rank0" && !long_tests()) {
    GTEST_SKIP() << "long variant: set TRAINPACK_DISTRIBUTED_LONG=1";
  }
  const std::vector<int> targets = who == "both"    ? std::vector<int>{0, 1}
                                   : who == "rank0" ? std::vector<int>{0}
                                                    : std::vector<int>{1};
  const std::string whole = run_pair("whole");
  const std::string d0 = path("run0"), d1 = path("run1");
  // The targeted ranks wait at step 5 for the signal; the others go on to the stop vote.
  std::vector<std::string> args[2];
  for (int r = 0; r < 2; ++r) {
    args[r] = {"--logdir", r == 0 ? d0 : d1};
    for (int t : targets) {
      if (t == r)
        args[r].insert(args[r].end(), {"--only-rank", std::to_string(r), "--wait-signal-at", "5"});
    }
  }
  auto pair = start("term", args[0], args[1]);
  for (int t : targets) {
    ASSERT_TRUE((*pair)[t].wait_line("step 5", kRunSeconds)) << (*pair)[t].describe();
  }
  for (int t : targets) (*pair)[t].signal(SIGTERM);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ((*pair)[r].wait_exit(kRunSeconds), 143)
        << "rank " << r << " " << (*pair)[r].describe();
    std::cout << "rank " << r << " stopped: " << (*pair)[r].line("end ") << "\n";
    EXPECT_EQ((*pair)[r].line("end "), "end 5 15") << "rank " << r;
  }
  EXPECT_TRUE(fs::exists(fs::path(d0) / "model-5.data"));
  EXPECT_FALSE(fs::exists(fs::path(d0) / "model-6.data"));
  EXPECT_NE(read_text(fs::path(d0) / "checkpoint").find("model-5"), std::string::npos);
  EXPECT_TRUE(resume_pair("resumed", d0, d1, 5) == whole)
      << "the resumed run ended with other parameters than the uninterrupted one";
}

INSTANTIATE_TEST_SUITE_P(Targets, SigtermTest, ::testing::Values("both", "rank1", "rank0"),
                         [](const auto& info) { return info.param; });

// An exception on rank 1: rank 1 exits 1 with its error; rank 0's next collective fails at once
// and it exits 1 with a DistributedError that names rank 1 and its message. With
// TORCHELASTIC_ERROR_FILE set (torchrun sets it), both write torchrun's {"message", "timestamp"}.
TEST_F(TwoProcessTest, AnExceptionOnOneRankEndsBothNamingIt) {
  const std::map<std::string, std::string> env[2] = {
      {{"TORCHELASTIC_ERROR_FILE", path("error0.json")}},
      {{"TORCHELASTIC_ERROR_FILE", path("error1.json")}}};
  auto pair = start("fail", {"--timeout-ms", "20000"},
                    {"--timeout-ms", "20000", "--only-rank", "1", "--throw-at", "5"}, env);
  EXPECT_EQ((*pair)[1].wait_exit(kRunSeconds), 1) << (*pair)[1].describe();
  EXPECT_NE((*pair)[1].err().find("injected failure at global_step 5"), std::string::npos)
      << (*pair)[1].err();
  EXPECT_EQ((*pair)[0].wait_exit(kRunSeconds), 1) << (*pair)[0].describe();
  EXPECT_LT(seconds((*pair)[0].ended() - (*pair)[1].ended()), 5) << "rank 0 did not fail promptly";
  const std::string err0 = (*pair)[0].err();
  EXPECT_NE(err0.find("DistributedError (failed rank 1)"), std::string::npos) << err0;
  EXPECT_NE(err0.find("rank 1 failed: "), std::string::npos) << err0;
  EXPECT_NE(err0.find("injected failure at global_step 5"), std::string::npos) << err0;

  const auto file1 = nlohmann::json::parse(read_text(path("error1.json")));
  ASSERT_TRUE(file1.contains("message") && file1.contains("timestamp")) << file1.dump();
  EXPECT_NE(file1["message"].get<std::string>().find("rank 1: "), std::string::npos);
  EXPECT_NE(file1["message"].get<std::string>().find("injected failure at global_step 5"),
            std::string::npos);
  EXPECT_GT(std::stoll(file1["timestamp"].get<std::string>()), 1600000000);
  const auto file0 = nlohmann::json::parse(read_text(path("error0.json")));
  EXPECT_NE(file0["message"].get<std::string>().find("rank 1 failed: "), std::string::npos)
      << file0.dump();
}

// Rank 1 killed with SIGKILL while rank 0 waits for it in a collective: rank 0 exits non-zero at
// once (well within the collective timeout), with a message naming rank 1.
TEST_F(TwoProcessTest, ARankKilledMakesTheOtherExitNamingIt) {
  // A timeout of 20 s (it also bounds the rendezvous, which a loaded or sanitized run can make
  // slow), but a dead peer is noticed at once, not after the timeout: rank 0 must end within 5 s.
  auto pair = start("kill", {"--timeout-ms", "20000"},
                    {"--timeout-ms", "20000", "--only-rank", "1", "--wait-signal-at", "5"});
  ASSERT_TRUE((*pair)[1].wait_line("step 5", kRunSeconds)) << (*pair)[1].describe();
  const SteadyClock::time_point killed = SteadyClock::now();
  (*pair)[1].signal(SIGKILL);
  EXPECT_EQ((*pair)[0].wait_exit(kRunSeconds), 1) << (*pair)[0].describe();
  EXPECT_LT(seconds((*pair)[0].ended() - killed), 5)
      << "rank 0 took 5 s or more to notice the dead rank (the timeout is 20 s)";
  EXPECT_EQ((*pair)[1].wait_exit(kRunSeconds), 128 + SIGKILL);
  const std::string err0 = (*pair)[0].err();
  EXPECT_NE(err0.find("DistributedError (failed rank 1)"), std::string::npos) << err0;
  EXPECT_NE(err0.find(fmt::format("rank 1 (process {}) has died", (*pair)[1].pid())),
            std::string::npos)
      << err0;
}

// Rank 1 stopped with SIGSTOP (it hangs): rank 0 fails once the collective timeout (2 s) has
// passed, saying that a rank may hang and naming the timeout.
TEST_F(TwoProcessTest, AHangingRankMakesTheOtherFailAfterTheTimeout) {
  auto pair = start("hang", {"--timeout-ms", "2000"},
                    {"--timeout-ms", "2000", "--only-rank", "1", "--wait-signal-at", "5"});
  ASSERT_TRUE((*pair)[1].wait_line("step 5", kRunSeconds)) << (*pair)[1].describe();
  const SteadyClock::time_point stopped = SteadyClock::now();
  (*pair)[1].signal(SIGSTOP);
  EXPECT_EQ((*pair)[0].wait_exit(kRunSeconds), 1) << (*pair)[0].describe();
  const double took = seconds((*pair)[0].ended() - stopped);
  EXPECT_GT(took, 1.8);
  EXPECT_LT(took, 15);
  (*pair)[1].signal(SIGKILL);
  (*pair)[1].wait_exit(kRunSeconds);
  const std::string err0 = (*pair)[0].err();
  EXPECT_NE(err0.find("a rank may hang (the timeout is 2 s)"), std::string::npos) << err0;
}

// A rank that fails before joining (a flag it refuses) says so in the store: the other ends at
// once, naming it, its host and its message, instead of waiting for the join timeout (60 s here).
// For rank 1 (a client of the store) and for rank 0, which serves the store and keeps it until
// rank 1 has read the message.
TEST_F(TwoProcessTest, ARankFailingBeforeJoiningEndsTheOtherAtOnceNamingIt) {
  for (int failing : {1, 0}) {
    SCOPED_TRACE(fmt::format("rank {} fails before joining", failing));
    const int other = 1 - failing;
    const std::map<std::string, std::string> env[2] = {
        {{"TORCHELASTIC_ERROR_FILE", path(fmt::format("prejoin{}.error0.json", failing))}},
        {{"TORCHELASTIC_ERROR_FILE", path(fmt::format("prejoin{}.error1.json", failing))}}};
    const std::vector<std::string> args{
        "--join-timeout-ms",  "60000",
        "--only-rank",        std::to_string(failing),
        "--fail-before-join", "--batch-size 50 is not a multiple of 2"};
    auto pair = start(fmt::format("prejoin{}", failing), args, args, env);
    EXPECT_EQ((*pair)[failing].wait_exit(kRunSeconds), 2) << (*pair)[failing].describe();
    EXPECT_EQ((*pair)[other].wait_exit(kRunSeconds), 1) << (*pair)[other].describe();
    EXPECT_LT(seconds((*pair)[other].ended() - (*pair)[other].started()), 20)
        << "rank " << other << " waited for the join timeout";
    const std::string err = (*pair)[other].err();
    EXPECT_NE(err.find(fmt::format("DistributedError (failed rank {})", failing)),
              std::string::npos)
        << err;
    EXPECT_NE(
        err.find(fmt::format("rank {} cannot join the group: rank {} (host ", other, failing)),
        std::string::npos)
        << err;
    EXPECT_NE(err.find(") failed before joining: --batch-size 50 is not a multiple of 2"),
              std::string::npos)
        << err;
    const auto file = nlohmann::json::parse(
        read_text(path(fmt::format("prejoin{}.error{}.json", failing, failing))));
    EXPECT_EQ(file["message"].get<std::string>(),
              fmt::format("rank {}: --batch-size 50 is not a multiple of 2", failing));
  }
}

// A rank that never joins (it crashed before joining, without a word): the other fails when the
// join timeout (2 s) has passed, naming it; not after the collective timeout (20 s).
TEST_F(TwoProcessTest, ARankThatNeverJoinsIsNamedAfterTheJoinTimeout) {
  auto pair = start("nojoin", {"--join-timeout-ms", "2000"},
                    {"--join-timeout-ms", "2000", "--only-rank", "1", "--never-join"});
  EXPECT_EQ((*pair)[0].wait_exit(kRunSeconds), 1) << (*pair)[0].describe();
  const double took = seconds((*pair)[0].ended() - (*pair)[0].started());
  EXPECT_GT(took, 1.9);
  EXPECT_LT(took, 15);
  (*pair)[1].signal(SIGKILL);
  (*pair)[1].wait_exit(kRunSeconds);
  const std::string err0 = (*pair)[0].err();
  EXPECT_NE(err0.find("DistributedError (failed rank 1)"), std::string::npos) << err0;
  EXPECT_NE(err0.find("rank 0 cannot join the group: rank 1 of 2 did not join within 2 s "
                      "(DistributedOptions().join_timeout)"),
            std::string::npos)
      << err0;
}

// Ranks given different loops would pair their collectives wrongly and hang: both fail at once
// with an error that says so.
TEST_F(TwoProcessTest, DifferentStepsPerEpochAreAClearError) {
  auto pair = start("loops", {"16", "3", "6"}, {"16", "3", "5"});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ((*pair)[r].wait_exit(kRunSeconds), 1) << "rank " << r << " " << (*pair)[r].describe();
    const std::string err = (*pair)[r].err();
    // Both ranks name the one that differs from rank 0, with its host, and both loops.
    EXPECT_NE(err.find("the ranks were given different loops: rank 1 (host "), std::string::npos)
        << err;
    EXPECT_NE(err.find(") has steps_per_epoch 5, max_epoch 3, rank 0 (host "), std::string::npos)
        << err;
    EXPECT_NE(err.find(") has steps_per_epoch 6, max_epoch 3; every rank must run"),
              std::string::npos)
        << err;
  }
}

// Ranks whose data is shuffled with other seeds would shard other orders (overlapping shards):
// both fail before the first step, naming the data that this rank reads.
TEST_F(TwoProcessTest, RanksGivenOtherDataSeedsFailBeforeTheFirstStep) {
  auto pair = start("seeds", {"--data-seed", "3"}, {"--data-seed", "4"});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ((*pair)[r].wait_exit(kRunSeconds), 1) << "rank " << r << " " << (*pair)[r].describe();
    const std::string err = (*pair)[r].err();
    const std::string data =
        "BatchData(batch_size=8) over ShardData(world_size=2) over DataFromList (96 datapoints, "
        "shuffled with seed ";
    EXPECT_NE(err.find("the ranks were given different training data: rank 1 (host "),
              std::string::npos)
        << err;
    EXPECT_NE(err.find(") reads " + data + "4), and rank 0 (host "), std::string::npos) << err;
    EXPECT_NE(err.find(") reads " + data + "3) (another seed"), std::string::npos) << err;
    EXPECT_EQ((*pair)[r].line("step "), "") << "a step ran on rank " << r;
  }
}

// Ranks that built different modules (rank 1 has a BatchNorm1d after the first layer): both fail
// before the first step, naming rank 1, its host and the first trainable parameter that differs.
TEST_F(TwoProcessTest, RanksWithDifferentModelsFailBeforeTheFirstStep) {
  auto pair = start("models", {}, {"--bn"});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ((*pair)[r].wait_exit(kRunSeconds), 1) << "rank " << r << " " << (*pair)[r].describe();
    const std::string err = (*pair)[r].err();
    EXPECT_NE(err.find("DataParallelTrainer: the ranks' models differ: rank 1 (host "),
              std::string::npos)
        << err;
    EXPECT_NE(err.find(") has trainable parameter #3 `norm.weight` of shape [16] Float, rank 0 "
                       "(host "),
              std::string::npos)
        << err;
    EXPECT_NE(err.find(") has trainable parameter #3 `fc2.weight` of shape [1, 16] Float (6 and 4 "
                       "trainable parameters in all); every rank must build the same module"),
              std::string::npos)
        << err;
    EXPECT_EQ((*pair)[r].line("step "), "") << "a step ran on rank " << r;
  }
}

}  // namespace two_process_test
}  // namespace trainpack
