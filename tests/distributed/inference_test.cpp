// Validation and training statistics under data-parallel training, with 2 processes on
// 127.0.0.1 (tests/distributed/inference_worker/main.cpp is one rank):
// - an InferenceRunner sharded over the ranks (13 batches: 7 and 6, one of them short) gives
//   exactly the figures of the whole set on one process, both the chief's own whole-set runner on
//   the same weights and a separate single-process run;
// - the training scalars in the chief's stats.json are the mean over the ranks of each rank's
//   own moving average;
// - stats.json, the event file and log.log are the chief's: rank 1 writes nothing;
// - an inferencer without partial sums is refused at setup, by name.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include "support/sanitizers.h"
#include "support/temp_dir.h"
#include "trainpack/utils/stats_json.h"

#ifndef TRAINPACK_INFERENCE_WORKER
#error "TRAINPACK_INFERENCE_WORKER (the path of trainpack_inference_worker) must be defined"
#endif

namespace trainpack {
namespace inference_test {

namespace fs = std::filesystem;

// A port nobody listens on now: bound to port 0, then released.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct Worker {
  pid_t pid = -1;
  fs::path out;  // its stdout
  fs::path err;  // its stderr
};

// Starts the worker as `rank` of `world` (world 0: a single process without the variables).
Worker start(const fs::path& dir, const std::string& name, int rank, int world, int port,
             const std::vector<std::string>& args) {
  Worker w;
  w.out = dir / (name + ".out");
  w.err = dir / (name + ".err");
  std::vector<std::string> argv_s = {TRAINPACK_INFERENCE_WORKER};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = w.out.string();
  const std::string err = w.err.string();
  w.pid = ::fork();
  if (w.pid == 0) {
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr)) {
      ::_exit(127);
    }
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                          "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "TORCHELASTIC_RUN_ID",
                          "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE"}) {
      ::unsetenv(v);
    }
    if (world > 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return w;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits for every worker, killing all of them after `limit`; returns their exit codes (-1: killed
// or crashed). A failure prints what they wrote on stderr.
std::vector<int> wait_all(const std::vector<Worker>& workers,
                          std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::vector<int> codes(workers.size(), -2);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t left = workers.size();
  while (left > 0) {
    for (size_t i = 0; i < workers.size(); ++i) {
      if (codes[i] != -2) continue;
      int status = 0;
      if (::waitpid(workers[i].pid, &status, WNOHANG) == workers[i].pid) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "the workers did not finish within " << limit.count() << " s; killed";
      for (size_t i = 0; i < workers.size(); ++i) {
        if (codes[i] != -2) continue;
        ::kill(workers[i].pid, SIGKILL);
        ::waitpid(workers[i].pid, nullptr, 0);
        codes[i] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < workers.size(); ++i) {
    if (codes[i] != 0) {
      std::cerr << "worker " << i << " exited with " << codes[i] << "; its stderr:\n"
                << read_file(workers[i].err);
    }
  }
  return codes;
}

std::vector<StatsEntry> stats_of(const fs::path& dir) {
  const ParsedStats parsed = parse_stats_file(read_file(dir / "stats.json"));
  EXPECT_EQ(parsed.status, ParsedStats::Status::kValid) << dir;
  return parsed.entries;
}

double number(const StatsEntry& e, const std::string& key) {
  const StatValue* v = e.find(key);
  if (v == nullptr) {
    ADD_FAILURE() << "stats.json has no '" << key << "'";
    return 0;
  }
  return std::holds_alternative<double>(*v) ? std::get<double>(*v)
                                            : static_cast<double>(std::get<int64_t>(*v));
}

// The `local rank=<r> epoch=<e> <name>=<value>` lines: (epoch, name) -> value.
std::map<std::pair<int64_t, std::string>, double> local_values(const fs::path& out) {
  std::map<std::pair<int64_t, std::string>, double> values;
  std::istringstream in(read_file(out));
  std::string line;
  while (std::getline(in, line)) {
    long long rank = 0, epoch = 0;
    char name[64];
    double value = 0;
    if (std::sscanf(line.c_str(), "local rank=%lld epoch=%lld %63[^=]=%lf", &rank, &epoch, name,
                    &value) == 4) {
      values[{epoch, name}] = value;
    }
  }
  return values;
}

bool has_event_file(const fs::path& dir) {
  if (!fs::exists(dir)) return false;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) return true;
  }
  return false;
}

class DistributedInference : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    TRAINPACK_SKIP_UNDER_TSAN();
    TRAINPACK_SKIP_WITHOUT_GLOO();
  }

 protected:
  // Runs 2 ranks with their own log directories r0 and r1; returns their workers.
  std::vector<Worker> run_two(const std::string& lr, const std::string& epochs,
                              const std::vector<std::string>& extra = {}) {
    const int port = free_port();
    EXPECT_GT(port, 0);
    std::vector<Worker> workers;
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> args = {path("r" + std::to_string(r)).string(), lr, epochs};
      args.insert(args.end(), extra.begin(), extra.end());
      workers.push_back(start(dir(), "rank" + std::to_string(r), r, 2, port, args));
    }
    return workers;
  }
};

TEST_F(DistributedInference, ShardedValidationAndScalarMeansWrittenByTheChiefOnly) {
  const auto workers = run_two("0.05", "2");
  ASSERT_EQ(wait_all(workers), (std::vector<int>{0, 0}));

  // The files are the chief's.
  EXPECT_TRUE(fs::exists(path("r0") / "stats.json"));
  EXPECT_TRUE(fs::exists(path("r0") / "log.log"));
  EXPECT_TRUE(has_event_file(path("r0")));
  EXPECT_FALSE(fs::exists(path("r1")) && !fs::is_empty(path("r1")))
      << "rank 1 wrote into its log directory";

  const auto entries = stats_of(path("r0"));
  ASSERT_EQ(entries.size(), 2u);
  const auto mine = local_values(workers[0].out);
  const auto theirs = local_values(workers[1].out);
  for (const auto& e : entries) {
    const auto epoch = static_cast<int64_t>(number(e, "epoch_num"));
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    // Sharded over the ranks == the whole set on the chief, bit for bit.
    EXPECT_EQ(number(e, "validation_cost"), number(e, "whole_cost"));
    EXPECT_EQ(number(e, "validation_error"), number(e, "whole_error"));
    EXPECT_GT(number(e, "validation_error"), 0.0);
    // The training scalars: the mean over the ranks of each rank's own moving average.
    for (const std::string name : {"cost", "abs_err"}) {
      ASSERT_TRUE(mine.count({epoch, name}) && theirs.count({epoch, name})) << name;
      const double a = mine.at({epoch, name});
      const double b = theirs.at({epoch, name});
      EXPECT_NE(a, b) << name << ": the ranks saw different data, so their averages differ";
      EXPECT_EQ(number(e, name), (a + b) / 2) << name;
    }
  }
  // Rank 1 skipped the chief-only runner, as every rank but the chief does by design: not a
  // warning (an INFO line, which ranks other than the chief do not log).
  EXPECT_EQ(read_file(workers[1].out).find("Callback InferenceRunner is chief-only, skipped"),
            std::string::npos);
}

TEST_F(DistributedInference, ShardedValidationEqualsOneProcessExactlyAlsoWithoutSeek) {
  // Learning rate 0: the same (seeded) weights in both runs, so the figures must be identical.
  const auto single = start(dir(), "single", 0, 0, 0, {path("one").string(), "0", "1"});
  ASSERT_EQ(wait_all({single}), (std::vector<int>{0}));
  // Through a flow that cannot seek: each rank reads and drops the other's batches.
  const auto workers = run_two("0", "1", {"unseekable"});
  ASSERT_EQ(wait_all(workers), (std::vector<int>{0, 0}));

  const auto one = stats_of(path("one"));
  const auto two = stats_of(path("r0"));
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(two.size(), 1u);
  for (const std::string key : {"validation_cost", "validation_error"}) {
    EXPECT_EQ(number(two[0], key), number(one[0], key)) << key;
  }
  EXPECT_EQ(number(one[0], "validation_cost"), number(one[0], "whole_cost"));
}

TEST_F(DistributedInference, InferencerWithoutPartialSumsIsRefusedAtSetup) {
  const auto workers = run_two("0.05", "1", {"no-partial-sums"});
  ASSERT_EQ(wait_all(workers), (std::vector<int>{1, 1}));
  for (const auto& w : workers) {
    const std::string err = read_file(w.err);
    EXPECT_NE(err.find("the inferencer MeanAbs cannot combine its statistics over the 2 ranks"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("_partial_sums()"), std::string::npos) << err;
    EXPECT_NE(err.find("shard_over_ranks(false)"), std::string::npos) << err;
  }
}

}  // namespace inference_test
}  // namespace trainpack
