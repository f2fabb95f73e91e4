// DistributedEnv::from_variables (torchrun's, SLURM's or hand-set variables) and the errors of
// DistributedOptions: every bad or missing variable is std::invalid_argument naming the variable,
// its value and what it must be. Nothing here opens a connection.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "trainpack/core/distributed.h"

namespace trainpack {
namespace distributed_env_test {

using Vars = std::map<std::string, std::string>;

DistributedEnv env_of(const Vars& vars) {
  return DistributedEnv::from_variables([&](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

// A valid hand-set group of 2 (rank 1), with `changes` applied and the variables `unset` removed.
Vars group_of_two(const Vars& changes = {}, const std::vector<std::string>& unset = {}) {
  Vars v{
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  for (const auto& [k, val] : changes) v[k] = val;
  for (const auto& k : unset) v.erase(k);
  return v;
}

// The message of the std::invalid_argument that `vars` gives ("" when none).
std::string error_of(const Vars& vars) {
  try {
    env_of(vars);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_HAS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(DistributedEnvTest, NoVariablesIsOneProcess) {
  const DistributedEnv env = env_of({});
  EXPECT_FALSE(env.distributed());
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.launcher, "");
}

TEST(DistributedEnvTest, HandSetGroup) {
  const DistributedEnv env = env_of(group_of_two());
  EXPECT_TRUE(env.distributed());
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
  EXPECT_EQ(env.local_rank, 1);  // defaults to the rank: one machine
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_FALSE(env.agent_store);
  EXPECT_EQ(env.restart_count, 0);
  EXPECT_EQ(env.error_file, "");
  EXPECT_EQ(env.launcher, "environment");
}

TEST(DistributedEnvTest, WorldSizeOneIsOneProcessWithoutMaster) {
  const DistributedEnv env = env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_FALSE(env.distributed());
  EXPECT_EQ(env.world_size, 1);
  // Such a group joins nobody: ProcessGroup::from_environment gives a group of one.
  auto group = ProcessGroup::from_environment(DistributedOptions().env(env));
  EXPECT_FALSE(group->distributed());
  EXPECT_EQ(group->backend(), "none");
}

TEST(DistributedEnvTest, TorchrunIsDetectedAndItsAgentStoreHonoured) {
  const DistributedEnv env = env_of(group_of_two({{"TORCHELASTIC_RUN_ID", "none"},
                                                  {"LOCAL_RANK", "0"},
                                                  {"LOCAL_WORLD_SIZE", "1"},
                                                  {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                                  {"TORCHELASTIC_RESTART_COUNT", "3"},
                                                  {"TORCHELASTIC_ERROR_FILE", "/tmp/e.json"}}));
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_TRUE(env.agent_store);
  EXPECT_EQ(env.restart_count, 3);
  EXPECT_EQ(env.error_file, "/tmp/e.json");
  EXPECT_FALSE(env_of(group_of_two({{"TORCHELASTIC_USE_AGENT_STORE", "False"}})).agent_store);
}

TEST(DistributedEnvTest, Slurm) {
  const DistributedEnv env = env_of({{"SLURM_PROCID", "3"},
                                     {"SLURM_NTASKS", "4"},
                                     {"SLURM_LOCALID", "1"},
                                     {"MASTER_ADDR", "node01"},
                                     {"MASTER_PORT", "29500"}});
  EXPECT_EQ(env.launcher, "SLURM");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "node01");
  // One SLURM task is one process (nothing to join).
  EXPECT_FALSE(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).distributed());
  // RANK/WORLD_SIZE win over SLURM's (torchrun inside an allocation).
  EXPECT_EQ(env_of(group_of_two({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}})).world_size, 2);
}

TEST(DistributedEnvTest, SlurmErrorsNameSlurmVariablesAndTheJobScriptLines) {
  const Vars slurm{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}};
  std::string e = error_of(slurm);
  EXPECT_HAS(e, "MASTER_ADDR is not set");
  EXPECT_HAS(e, "scontrol show hostnames");
  Vars with_addr = slurm;
  with_addr["MASTER_ADDR"] = "node01";
  EXPECT_HAS(error_of(with_addr), "export MASTER_PORT=29500");
  e = error_of({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}});
  EXPECT_HAS(e, "SLURM_PROCID=2 is out of range");
  EXPECT_HAS(e, "below SLURM_NTASKS=2");
  e = error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "x"}});
  EXPECT_HAS(e, "SLURM_NTASKS='x' is not a whole number");
  Vars bad_local = with_addr;
  bad_local["MASTER_PORT"] = "29500";
  bad_local["SLURM_LOCALID"] = "2";
  EXPECT_HAS(error_of(bad_local), "SLURM_LOCALID=2 is out of range");
}

TEST(DistributedEnvTest, RankWithoutWorldSizeAndTheReverse) {
  std::string e = error_of({{"RANK", "1"}});
  EXPECT_HAS(e, "RANK='1' is set but WORLD_SIZE is not");
  EXPECT_HAS(e, "the number of processes");
  e = error_of({{"WORLD_SIZE", "2"}});
  EXPECT_HAS(e, "WORLD_SIZE='2' is set but RANK is not");
  EXPECT_HAS(e, "from 0 to WORLD_SIZE - 1");
}

TEST(DistributedEnvTest, NotANumber) {
  for (const std::string bad : {"1x", "", " 1", "1 ", "0x1", "1.0", "99999999999999999999"}) {
    for (const std::string var : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
      const std::string e = error_of(group_of_two({{var, bad}}));
      EXPECT_HAS(e,
                 fmt::format("the environment variable {}='{}' is not a whole number", var, bad));
      EXPECT_HAS(e, "it must be");
    }
  }
}

TEST(DistributedEnvTest, OutOfRange) {
  std::string e = error_of(group_of_two({{"RANK", "2"}}));
  EXPECT_HAS(e, "RANK=2 is out of range; it must be this process's rank, below WORLD_SIZE=2");
  EXPECT_HAS(error_of(group_of_two({{"RANK", "-1"}})), "RANK=-1 is out of range");
  e = error_of(group_of_two({{"WORLD_SIZE", "0"}, {"RANK", "0"}}));
  EXPECT_HAS(e, "WORLD_SIZE=0 is out of range; it must be the number of processes (from 1");
  EXPECT_HAS(error_of(group_of_two({{"WORLD_SIZE", "-2"}})), "WORLD_SIZE=-2 is out of range");
  e = error_of(group_of_two({{"LOCAL_RANK", "2"}}));
  EXPECT_HAS(e, "LOCAL_RANK=2 is out of range");
  EXPECT_HAS(e, "below WORLD_SIZE=2");
  e = error_of(group_of_two({{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "1"}}));
  EXPECT_HAS(e, "LOCAL_RANK=1 is out of range");
  EXPECT_HAS(e, "below LOCAL_WORLD_SIZE=1");
  EXPECT_HAS(error_of(group_of_two({{"LOCAL_RANK", "-1"}})), "LOCAL_RANK=-1 is out of range");
  EXPECT_HAS(error_of(group_of_two({{"LOCAL_WORLD_SIZE", "3"}})),
             "LOCAL_WORLD_SIZE=3 is out of range");
}

TEST(DistributedEnvTest, MasterAddrAndPort) {
  std::string e = error_of(group_of_two({}, {"MASTER_ADDR"}));
  EXPECT_HAS(e, "MASTER_ADDR is not set; it must be the host name or address of rank 0's machine");
  EXPECT_HAS(error_of(group_of_two({{"MASTER_ADDR", ""}})), "MASTER_ADDR is not set");
  e = error_of(group_of_two({}, {"MASTER_PORT"}));
  EXPECT_HAS(e, "MASTER_PORT is not set; it must be a free TCP port on rank 0's machine");
  EXPECT_HAS(error_of(group_of_two({{"MASTER_PORT", "0"}})),
             "MASTER_PORT=0 is out of range; it must be a TCP port (from 1 to 65535)");
  EXPECT_HAS(error_of(group_of_two({{"MASTER_PORT", "70000"}})),
             "MASTER_PORT=70000 is out of range");
  EXPECT_HAS(error_of(group_of_two({{"MASTER_PORT", "abc"}})),
             "MASTER_PORT='abc' is not a whole number; it must be a free TCP port");
}

TEST(DistributedEnvTest, RestartCount) {
  EXPECT_HAS(error_of(group_of_two({{"TORCHELASTIC_RESTART_COUNT", "one"}})),
             "TORCHELASTIC_RESTART_COUNT='one' is not a whole number; it must be how often "
             "torchrun restarted the group");
  EXPECT_HAS(error_of(group_of_two({{"TORCHELASTIC_RESTART_COUNT", "-1"}})),
             "TORCHELASTIC_RESTART_COUNT=-1 is out of range");
}

// DistributedOptions' errors come before any connection is tried (the env below points nowhere).
std::string options_error(const DistributedOptions& options) {
  try {
    ProcessGroup::from_environment(options);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(DistributedOptionsTest, Errors) {
  const DistributedEnv env = env_of(group_of_two({{"MASTER_PORT", "1"}}));
  std::string e;
#ifndef USE_C10D_NCCL
  e = options_error(DistributedOptions().env(env).backend("nccl"));
  EXPECT_HAS(e, "DistributedOptions().backend(\"nccl\"): this LibTorch was built without NCCL");
  EXPECT_HAS(e, "use \"gloo\"");
  // Alone too: the program that runs alone today runs in a group tomorrow.
  EXPECT_HAS(options_error(DistributedOptions().backend("nccl")), "built without NCCL");
#endif
#ifndef TRAINPACK_WITH_GLOO
  // A build without Gloo's headers: the CPU backend, asked for or the default, says how to get it.
  for (const DistributedOptions& options :
       {DistributedOptions().env(env).backend("gloo"), DistributedOptions().env(env)}) {
    e = options_error(options);
    EXPECT_HAS(e, "the Gloo backend (data-parallel training on the CPU) is not in this build");
    EXPECT_HAS(e, "apt-get install libgloo-dev");
    EXPECT_HAS(e, "or train on CUDA GPUs with \"nccl\"");
  }
#endif
  e = options_error(DistributedOptions().env(env).backend("mpi"));
  EXPECT_HAS(e, "DistributedOptions().backend(\"mpi\"): unknown backend; use \"gloo\"");
  e = options_error(DistributedOptions().env(env).timeout(std::chrono::milliseconds(0)));
  EXPECT_HAS(e, "DistributedOptions().timeout: must be > 0");
  EXPECT_HAS(e, "got 0 ms");
  EXPECT_HAS(options_error(DistributedOptions().env(env).timeout(std::chrono::seconds(-1))),
             "got -1000 ms");
  e = options_error(DistributedOptions().env(env).join_timeout(std::chrono::milliseconds(0)));
  EXPECT_HAS(e,
             "DistributedOptions().join_timeout: must be > 0 (the longest a rank waits for the "
             "others to join");
  EXPECT_HAS(e, "got 0 ms");
  // A heartbeat timeout a rank beating on time could miss.
  e = options_error(DistributedOptions()
                        .env(env)
                        .heartbeat_interval(std::chrono::seconds(2))
                        .heartbeat_timeout(std::chrono::seconds(3)));
  EXPECT_HAS(e, "heartbeat_timeout (3000 ms) must be at least twice heartbeat_interval (2000 ms)");
  EXPECT_HAS(e, "or 0 to turn the heartbeats off");
  EXPECT_HAS(
      options_error(DistributedOptions().env(env).heartbeat_timeout(std::chrono::milliseconds(-1))),
      "heartbeat_timeout (-1 ms)");
}

}  // namespace distributed_env_test
}  // namespace trainpack
