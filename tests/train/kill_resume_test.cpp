// A training process killed with SIGKILL at random moments: the child
// (tests/train/resume_child/main.cpp, built as trainpack_resume_child) saves a checkpoint every
// step and auto-resumes from its log directory. Killed twenty times -- while starting, restoring,
// training or writing a checkpoint -- and then left to finish, it ends with bitwise the
// parameters of a run never killed; every restart resumes from the newest valid checkpoint (never
// behind a save that it had reported complete) and starts from scratch only when there is none.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/ATen.h>

#include "support/child_process.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/train/config.h"
#include "trainpack/utils/checkpoint.h"

#ifndef TRAINPACK_RESUME_CHILD
#error "TRAINPACK_RESUME_CHILD (the path of trainpack_resume_child) must be defined"
#endif

namespace trainpack {
namespace kill_resume_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int64_t kTotalSteps = 40;  // the child's 5 epochs of 8 steps

// When to kill a child: `delay` seconds after it was spawned, or after it printed its start line.
struct KillPlan {
  enum class From { kSpawn, kStart } from = From::kSpawn;
  double delay = 0;
};

struct ChildRun {
  std::vector<std::string> lines;  // what it printed on stdout
  int status = 0;                  // from waitpid
  bool kill_sent = false;
  double seconds_to_start = 0;  // spawn -> start line (0 if none)
  double seconds_running = 0;   // start line -> exit (0 if none)
};

// Runs the child on `log_dir` (stderr appended to `stderr_file`), killing it as `kill` says;
// without a plan it must end by itself within a minute (it is killed and the test fails if not).
ChildRun run_child(const fs::path& log_dir, const fs::path& stderr_file,
                   std::optional<KillPlan> kill) {
  ChildRun run;
  testing::SpawnOptions options;
  options.stderr_file = stderr_file.string();
  options.append_stderr = true;
  const Clock::time_point spawned = Clock::now();
  const testing::Spawned child =
      testing::spawn({TRAINPACK_RESUME_CHILD, log_dir.string()}, options);
  if (child.pid < 0) return run;
  const pid_t pid = child.pid;

  std::optional<Clock::time_point> kill_at;
  if (kill && kill->from == KillPlan::From::kSpawn) {
    kill_at = spawned + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(kill->delay));
  }
  const Clock::time_point give_up = spawned + std::chrono::seconds(60);
  std::optional<Clock::time_point> started;
  std::string pending;
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (!run.kill_sent && ((kill_at && now >= *kill_at) || now >= give_up)) {
      ::kill(pid, SIGKILL);
      run.kill_sent = true;
      if (!kill_at || now >= give_up) ADD_FAILURE() << "the child ran for a minute; killed";
    }
    int timeout_ms = 100;
    if (!run.kill_sent && kill_at) {
      const auto left =
          std::chrono::duration_cast<std::chrono::microseconds>(*kill_at - now).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>((left + 999) / 1000, 0, 100));
    }
    if (testing::read_available(child.out_fd, timeout_ms, &pending) == testing::ReadResult::kEnd) {
      break;
    }
    for (const std::string& line : testing::take_lines(&pending)) {
      run.lines.push_back(line);
      if (line.rfind("start ", 0) == 0 && !started) {
        started = Clock::now();
        run.seconds_to_start = std::chrono::duration<double>(*started - spawned).count();
        if (kill && kill->from == KillPlan::From::kStart) {
          kill_at = *started + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(kill->delay));
        }
      }
    }
  }
  ::close(child.out_fd);
  while (::waitpid(pid, &run.status, 0) < 0 && errno == EINTR) {
  }
  if (started) run.seconds_running = std::chrono::duration<double>(Clock::now() - *started).count();
  return run;
}

// The number after `key ` on the first line that starts with it.
std::optional<int64_t> value_of(const ChildRun& run, const std::string& key) {
  for (const auto& line : run.lines) {
    if (line.rfind(key + " ", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  }
  return std::nullopt;
}

// The largest global step of the `saved` lines.
std::optional<int64_t> last_saved(const ChildRun& run) {
  std::optional<int64_t> out;
  for (const auto& line : run.lines) {
    if (line.rfind("saved ", 0) == 0) out = std::stoll(line.substr(6));
  }
  return out;
}

std::string describe(const ChildRun& run) {
  std::ostringstream out;
  out << "status " << run.status << ", printed:";
  for (const auto& line : run.lines) out << " [" << line << "]";
  return out.str();
}

int64_t step_of(const std::string& prefix) {
  const std::string name = fs::path(prefix).filename().string();
  return std::stoll(name.substr(name.find('-') + 1));
}

std::string file_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// stats.json of a run directory: global_step -> the entry's values, and the steps in file order.
std::map<int64_t, std::vector<std::pair<std::string, StatValue>>> stats_of(
    const fs::path& dir, std::vector<int64_t>* order) {
  std::map<int64_t, std::vector<std::pair<std::string, StatValue>>> out;
  const auto stats = JSONWriter::load_existing_json(dir.string());
  if (!stats) return out;
  for (const auto& e : *stats) {
    const int64_t gs = std::get<int64_t>(*e.find("global_step"));
    order->push_back(gs);
    out[gs] = e.items;
  }
  return out;
}

TEST(KillResume, TwentySigkillsAtRandomMomentsEndWithTheParametersOfAnUnkilledRun) {
  const fs::path root = testing::make_temp_dir("kill_resume");
  const fs::path ref_dir = root / "reference";
  const fs::path dir = root / "killed";
  const fs::path child_stderr = root / "child-stderr.txt";
  fs::create_directories(ref_dir);
  fs::create_directories(dir);

  // The run never killed; its timing spreads the kills over a run.
  const ChildRun reference = run_child(ref_dir, child_stderr, std::nullopt);
  ASSERT_TRUE(WIFEXITED(reference.status) && WEXITSTATUS(reference.status) == 0)
      << describe(reference) << "\n"
      << file_text(child_stderr);
  ASSERT_EQ(reference.lines.front(), "fresh");
  ASSERT_EQ(reference.lines.at(1), "start 0 1 0");
  ASSERT_EQ(value_of(reference, "done"), kTotalSteps);
  ASSERT_EQ(last_saved(reference), kTotalSteps);
  const double startup = reference.seconds_to_start;
  const double training = reference.seconds_running;

  std::mt19937 rng(20240607);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int64_t previous_start = 0;
  int64_t saved_so_far = -1;  // the newest save a child reported complete; -1: none
  int kills = 0, finished_early = 0, killed_before_start = 0;
  std::string starts;  // the start step of every run, for the summary line
  for (int attempt = 0; attempt <= 20; ++attempt) {
    SCOPED_TRACE("run " + std::to_string(attempt));
    // What the child must find: the newest valid checkpoint, computed before it starts.
    const std::optional<std::string> expected =
        AutoResumeTrainConfig::find_latest_valid_checkpoint(dir.string());
    if (saved_so_far >= 0) {
      // A save reported complete is never lost: a checkpoint at least that new is found.
      ASSERT_TRUE(expected.has_value()) << "no valid checkpoint after step " << saved_so_far;
      EXPECT_GE(step_of(*expected), saved_so_far);
    }
    std::optional<KillPlan> plan;
    if (attempt < 20) {
      plan = KillPlan();
      // One kill in four during start-up (loading, finding and restoring the checkpoint), the
      // others at a uniform moment in a stretch of training of a twelfth of the whole run.
      if (unit(rng) < 0.25) {
        plan->from = KillPlan::From::kSpawn;
        plan->delay = unit(rng) * startup * 1.2;
      } else {
        plan->from = KillPlan::From::kStart;
        plan->delay = unit(rng) * training / 12;
      }
    }
    const ChildRun run = run_child(dir, child_stderr, plan);
    const std::string what = describe(run);
    if (!plan) {
      ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << what << "\n"
                                                                         << file_text(child_stderr);
    } else if (WIFSIGNALED(run.status)) {
      EXPECT_EQ(WTERMSIG(run.status), SIGKILL) << what;
      ++kills;
    } else {
      // The kill came after the run had ended by itself.
      EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << what << "\n"
                                                                         << file_text(child_stderr);
      ++finished_early;
    }
    // Its first line says what it resumed from: exactly the newest valid checkpoint, or a fresh
    // start when there was none.
    if (run.lines.empty()) {
      ++killed_before_start;
      continue;
    }
    if (expected) {
      EXPECT_EQ(run.lines.front(), "found " + *expected) << what;
    } else {
      EXPECT_EQ(run.lines.front(), "fresh") << what;
    }
    if (const auto start = value_of(run, "start")) {
      const int64_t want = expected ? step_of(*expected) : 0;
      EXPECT_EQ(*start, want) << what;
      EXPECT_GE(*start, previous_start) << "a restart went backwards: " << what;
      // The line holds the epoch and step too: 8 steps per epoch.
      EXPECT_EQ(run.lines.at(1), "start " + std::to_string(want) + " " +
                                     std::to_string(want / 8 + 1) + " " + std::to_string(want % 8))
          << what;
      previous_start = *start;
      starts += " " + std::to_string(*start);
    } else {
      ++killed_before_start;
    }
    if (const auto s = last_saved(run)) saved_so_far = std::max(saved_so_far, *s);
    if (!plan) {
      EXPECT_EQ(value_of(run, "done"), kTotalSteps) << what;
    }
  }
  std::cout << "[          ] " << kills << " kills (" << killed_before_start
            << " before training started), " << finished_early
            << " runs ended before their kill; reference: start-up " << startup << " s, training "
            << training << " s; start steps:" << starts << "\n";
  EXPECT_GT(kills, 0);

  // The final checkpoints: bitwise the same parameters, RNG state, counters, moving average and
  // input position, and the optimizer's state (stored as tensors keyed by group and parameter
  // index, so it compares across processes). The killed run's newest valid checkpoint, which is
  // what a resume takes: a kill between the last step's checkpoint and the index update leaves
  // the index naming the one before (the index lists only checkpoints made durable), and a
  // restart from that last checkpoint has no step left to train, so nothing rewrites the index.
  const std::string final_ref = resolve_checkpoint_path(ref_dir.string());
  const std::optional<std::string> newest_killed =
      AutoResumeTrainConfig::find_latest_valid_checkpoint(dir.string());
  ASSERT_TRUE(newest_killed.has_value());
  const std::string final_killed = *newest_killed;
  EXPECT_EQ(fs::path(final_killed).filename(), "model-" + std::to_string(kTotalSteps));
  const TensorMap want = read_checkpoint(final_ref);
  const TensorMap got = read_checkpoint(final_killed);
  std::vector<std::string> want_keys, got_keys, differ;
  for (const auto& kv : want) want_keys.push_back(kv.first);
  for (const auto& kv : got) got_keys.push_back(kv.first);
  ASSERT_EQ(got_keys, want_keys);
  for (const auto& [key, value] : want) {
    const at::Tensor& g = got.at(key);
    if (g.scalar_type() != value.scalar_type() || !at::equal(g, value)) differ.push_back(key);
  }
  EXPECT_EQ(differ, std::vector<std::string>{}) << "entries that differ from the reference";
  for (const char* key : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "rng/cpu"}) {
    EXPECT_TRUE(want.count(key)) << key;
  }

  // stats.json survived every kill as a file that reads back: its entries are in step order, each
  // equal to the reference's entry of that step. An entry may be missing: a kill after the
  // checkpoint of a step and before JSONWriter wrote the step's entry loses it (the resumed run
  // starts after that step; with the last step's checkpoint, it trains nothing at all).
  std::vector<int64_t> want_order, got_order;
  const auto want_stats = stats_of(ref_dir, &want_order);
  const auto got_stats = stats_of(dir, &got_order);
  ASSERT_EQ(static_cast<int64_t>(want_order.size()), kTotalSteps);
  EXPECT_TRUE(std::is_sorted(got_order.begin(), got_order.end()) &&
              std::adjacent_find(got_order.begin(), got_order.end()) == got_order.end())
      << "stats.json steps out of order or repeated";
  EXPECT_FALSE(got_order.empty());
  for (const auto& [gs, items] : got_stats) {
    ASSERT_TRUE(want_stats.count(gs)) << gs;
    EXPECT_EQ(items, want_stats.at(gs)) << "stats.json entry of global_step " << gs;
  }
  std::cout << "[          ] stats.json: " << got_order.size() << " of " << kTotalSteps
            << " entries (the others were lost to kills between a save and JSONWriter's write)\n";

  if (!HasFailure()) fs::remove_all(root);
}

}  // namespace kill_resume_test
}  // namespace trainpack
