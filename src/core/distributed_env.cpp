// DistributedEnv: the group this process belongs to, read from torchrun's, SLURM's or
// hand-set variables (core/distributed.h).
#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "trainpack/core/distributed.h"

namespace trainpack {

namespace {

// An integer variable, or nullopt when unset. A value that is not a whole number (or does not
// fit) is std::invalid_argument naming the variable and what it must be.
std::optional<int64_t> read_int(const DistributedEnv::Lookup& get, const std::string& name,
                                const char* meaning) {
  const std::optional<std::string> value = get(name);
  if (!value) return std::nullopt;
  const std::string& text = *value;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE ||
      text.find_first_of(" \t\n") != std::string::npos) {
    throw std::invalid_argument(
        fmt::format("the environment variable {}='{}' is not a whole number; it must be {}", name,
                    text, meaning));
  }
  return static_cast<int64_t>(parsed);
}

int64_t require_int(const DistributedEnv::Lookup& get, const std::string& name, const char* meaning,
                    const std::string& why) {
  std::optional<int64_t> v = read_int(get, name, meaning);
  if (!v) {
    throw std::invalid_argument(fmt::format(
        "the environment variable {} is not set; it must be {} ({})", name, meaning, why));
  }
  return *v;
}

void check_range(const std::string& name, int64_t value, int64_t low, int64_t high,
                 const std::string& meaning) {
  if (value < low || value > high) {
    throw std::invalid_argument(
        fmt::format("the environment variable {}={} is out of range; it must be {} (from {} to {})",
                    name, value, meaning, low, high));
  }
}

bool is_true(const std::optional<std::string>& v) {
  return v && (*v == "True" || *v == "true" || *v == "1");
}

}  // namespace

DistributedEnv DistributedEnv::from_environment() {
  return from_variables([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

DistributedEnv DistributedEnv::from_variables(const Lookup& get) {
  DistributedEnv env;
  std::string rank_var, world_var, local_var, local_world_var;
  if (get("WORLD_SIZE").has_value() != get("RANK").has_value()) {
    const std::string set = get("RANK") ? "RANK" : "WORLD_SIZE";
    const std::string unset = get("RANK") ? "WORLD_SIZE" : "RANK";
    throw std::invalid_argument(fmt::format(
        "the environment variable {}='{}' is set but {} is not; they go together: RANK must be "
        "this process's rank, from 0 to WORLD_SIZE - 1, and WORLD_SIZE the number of processes "
        "(torchrun sets both; unset {} to run one process)",
        set, *get(set), unset, set));
  }
  if (get("WORLD_SIZE") || get("RANK")) {
    env.launcher = get("TORCHELASTIC_RUN_ID") ? "torchrun" : "environment";
    rank_var = "RANK";
    world_var = "WORLD_SIZE";
    local_var = "LOCAL_RANK";
    local_world_var = "LOCAL_WORLD_SIZE";
  } else if (get("SLURM_NTASKS") && get("SLURM_PROCID")) {
    env.launcher = "SLURM";
    rank_var = "SLURM_PROCID";
    world_var = "SLURM_NTASKS";
    local_var = "SLURM_LOCALID";
    local_world_var = "SLURM_NTASKS_PER_NODE";
  } else {
    return env;  // one process
  }
  const std::string how = env.launcher == "SLURM"
                              ? "srun sets it for every task"
                              : "torchrun sets it; set by hand, RANK and WORLD_SIZE go together";
  env.world_size = require_int(get, world_var, "the number of processes, at least 1", how);
  check_range(world_var, env.world_size, 1, 1 << 20, "the number of processes");
  env.rank = require_int(get, rank_var, "this process's rank, from 0 to WORLD_SIZE - 1", how);
  check_range(rank_var, env.rank, 0, env.world_size - 1,
              fmt::format("this process's rank, below {}={}", world_var, env.world_size));
  if (env.world_size == 1) {
    // A group of one (e.g. a single SLURM task): nothing to connect to.
    env.launcher = env.launcher == "SLURM" ? "" : env.launcher;
    return env;
  }
  // LOCAL_RANK: torchrun and srun set it; by hand it defaults to the rank (one machine).
  std::optional<int64_t> local_world =
      env.launcher == "SLURM"
          ? std::nullopt
          : read_int(get, local_world_var, "the number of processes per machine");
  env.local_world_size = local_world.value_or(env.world_size);
  check_range(local_world_var, env.local_world_size, 1, env.world_size,
              fmt::format("the number of processes on this machine, at most {}={}", world_var,
                          env.world_size));
  env.local_rank =
      read_int(get, local_var, "this process's rank on its machine").value_or(env.rank);
  check_range(local_var, env.local_rank, 0, env.local_world_size - 1,
              local_world ? fmt::format("this process's rank on its machine, below {}={}",
                                        local_world_var, env.local_world_size)
                          : fmt::format("this process's rank on its machine, below {}={}",
                                        world_var, env.world_size));

  const std::optional<std::string> addr = get("MASTER_ADDR");
  if (!addr || addr->empty()) {
    throw std::invalid_argument(fmt::format(
        "the environment variable MASTER_ADDR is not set; it must be the host name or address of "
        "rank 0's machine ({})",
        env.launcher == "SLURM"
            ? "in the job script: export MASTER_ADDR=$(scontrol show hostnames "
              "\"$SLURM_JOB_NODELIST\" | head -n 1)"
            : "torchrun sets it; by hand, e.g. MASTER_ADDR=127.0.0.1 on one machine"));
  }
  env.master_addr = *addr;
  const int64_t port =
      require_int(get, "MASTER_PORT", "a free TCP port on rank 0's machine (1 to 65535)",
                  env.launcher == "SLURM" ? "in the job script: export MASTER_PORT=29500"
                                          : "torchrun sets it; by hand, e.g. MASTER_PORT=29500");
  check_range("MASTER_PORT", port, 1, 65535, "a TCP port");
  env.master_port = static_cast<int>(port);

  env.agent_store = is_true(get("TORCHELASTIC_USE_AGENT_STORE"));
  env.restart_count =
      read_int(get, "TORCHELASTIC_RESTART_COUNT", "how often torchrun restarted the group")
          .value_or(0);
  check_range("TORCHELASTIC_RESTART_COUNT", env.restart_count, 0, INT32_MAX,
              "how often torchrun restarted the group");
  env.error_file = get("TORCHELASTIC_ERROR_FILE").value_or("");
  return env;
}

}  // namespace trainpack
