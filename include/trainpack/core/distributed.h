// A group of processes training together (data-parallel training, docs/distributed.md), on
// PyTorch's own distributed engine, c10d: Gloo on the CPU, NCCL on CUDA builds of LibTorch.
// tensorpack's multi-process trainers run on Horovod or TensorFlow's distributed runtime
// (docs/tensorpack-differences.md #42).
//
// Where the group comes from (DistributedEnv::from_environment), in this order: RANK and
// WORLD_SIZE (torchrun sets them, with LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
// TORCHELASTIC_*; or by hand); under SLURM (srun), SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID,
// with MASTER_ADDR and MASTER_PORT exported by the job script. Neither: a group of one process,
// which communicates with nobody. A variable that is missing, not a number or out of range is
// std::invalid_argument naming the variable, its value and what it must be.
//
// The rendezvous: rank 0 serves a c10d TCPStore at MASTER_ADDR:MASTER_PORT, as PyTorch's env://
// does; under torchrun without --standalone, torchrun's agent serves it and every rank connects
// under the prefix `/worker/attempt_<TORCHELASTIC_RESTART_COUNT>`.
//
// Failures: every collective waits at most DistributedOptions::timeout. A failed collective is a
// DistributedError naming the rank: one that reported its own failure (report_failure, which the
// trainer calls when training fails), else one whose process is gone (for ranks on this host),
// else none.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

namespace trainpack {

// Where this process stands in the group, read from the environment (see the top of this file).
struct DistributedEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;        // LOCAL_RANK / SLURM_LOCALID; the CUDA device under NCCL
  int64_t local_world_size = 1;  // LOCAL_WORLD_SIZE / SLURM_NTASKS_PER_NODE, else world_size
  std::string master_addr;       // MASTER_ADDR
  int master_port = 0;           // MASTER_PORT
  bool agent_store = false;      // TORCHELASTIC_USE_AGENT_STORE=True: torchrun serves the store
  int64_t restart_count = 0;     // TORCHELASTIC_RESTART_COUNT: how often torchrun restarted
  std::string error_file;        // TORCHELASTIC_ERROR_FILE, or ""
  std::string launcher;          // "torchrun", "SLURM", "environment" or "" (one process)

  // Reads the process's environment. Throws std::invalid_argument naming a bad variable.
  static DistributedEnv from_environment();
  // The same over any source of variables (tests pass a map); `get(name)` returns nullopt for a
  // variable that is not set.
  using Lookup = std::function<std::optional<std::string>(const std::string& name)>;
  static DistributedEnv from_variables(const Lookup& get);
  // Whether the environment describes a group of more than one process.
  bool distributed() const { return world_size > 1; }
};

// Options of ProcessGroup::from_environment.
struct DistributedOptions {
  // "gloo", "nccl", or "" for the default: NCCL when `cuda` is set and this LibTorch has NCCL,
  // else Gloo. "nccl" on a LibTorch without NCCL is std::invalid_argument saying so.
  TORCH_ARG(std::string, backend) = "";
  // Whether the group will reduce CUDA tensors (DataParallelTrainer on a CUDA device).
  TORCH_ARG(bool, cuda) = false;
  // The longest any collective or store operation waits before failing with DistributedError:
  // how long the others wait for a rank that hangs (one that dies is noticed at once). PyTorch's
  // default is 30 minutes; 10 leaves room for a slow checkpoint on the chief.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::minutes(10);
  // The longest a rank waits, when joining, for the rendezvous store and for the other ranks to
  // join. Launchers start the ranks together, so a rank missing after this crashed before joining
  // (one that fails with an error it reports, report_failure_before_joining, is named at once).
  // Raise it when a program does long work (loading a large dataset) before it joins.
  TORCH_ARG(std::chrono::milliseconds, join_timeout) = std::chrono::minutes(2);
  // Heartbeats beside the collectives: every `heartbeat_interval`, each rank adds to its counter
  // in the rendezvous store from a thread of its own. A rank whose counter stays still for
  // `heartbeat_timeout` (its host died, it hangs, or the network to it is cut), or a store that
  // this rank cannot reach for that long, ends the group: a rank waiting in a collective then
  // exits at once with status 1 (the message in its log and in torchrun's error file), a rank
  // outside one fails its next collective with DistributedError. A slow step or a slow
  // checkpoint never trips it (the heartbeat thread keeps beating). Zero: no heartbeats, only
  // `timeout`.
  TORCH_ARG(std::chrono::milliseconds, heartbeat_interval) = std::chrono::seconds(2);
  TORCH_ARG(std::chrono::milliseconds, heartbeat_timeout) = std::chrono::seconds(20);
  // Unset: DistributedEnv::from_environment().
  TORCH_ARG(std::optional<DistributedEnv>, env);
};

// A collective failed: a peer died, hung past the timeout, or reported an error. what() names the
// rank when it can be told (see the top of this file). `failed_rank()` is -1 when it cannot.
class DistributedError : public std::runtime_error {
 public:
  DistributedError(const std::string& message, int64_t failed_rank)
      : std::runtime_error(message), failed_rank_(failed_rank) {}
  int64_t failed_rank() const { return failed_rank_; }

 private:
  int64_t failed_rank_;
};

namespace detail {
struct ProcessGroupImpl;
}

// The processes training together; see the top of this file. Collectives are blocking and must be
// called by every rank in the same order (as c10d requires). Tensors may be on the CPU (Gloo) or,
// with NCCL, on this rank's CUDA device.
class ProcessGroup {
 public:
  // Joins the group that the environment describes (a group of one when it describes none).
  // Blocks until every rank has joined, at most `join_timeout`: a DistributedError names a rank
  // that reported a failure before joining, or lists those that did not come.
  static std::shared_ptr<ProcessGroup> from_environment(DistributedOptions options = {});
  // For a program that fails before it joins (a bad flag, a missing file): tells the ranks that
  // wait for this one in from_environment, which then fail at once naming this rank, its host and
  // `message` (instead of waiting for the join timeout), and writes TORCHELASTIC_ERROR_FILE. Rank 0
  // serves the store (unless torchrun does), so there it waits until every rank has read the
  // message, at most `join_timeout`. Nothing when the environment describes no group. Never
  // throws (a store that cannot be reached is a warning in the log).
  static void report_failure_before_joining(const std::string& message,
                                            DistributedOptions options = {}) noexcept;
  // A group of one process: every collective returns its input.
  static std::shared_ptr<ProcessGroup> single();

  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int64_t rank() const;
  int64_t world_size() const;
  int64_t local_rank() const;
  // Rank 0: it writes the logs, the checkpoints and the monitors' files.
  bool is_chief() const { return rank() == 0; }
  bool distributed() const { return world_size() > 1; }
  const DistributedEnv& env() const;
  // "gloo", "nccl", or "none" for a group of one.
  std::string backend() const;
  std::chrono::milliseconds timeout() const;

  // In place: every tensor becomes the sum (max) of it over the ranks.
  void all_reduce_sum(std::vector<at::Tensor>& tensors);
  void all_reduce_max(std::vector<at::Tensor>& tensors);
  // In place: every tensor becomes rank `root`'s (coalesced into few messages).
  void broadcast(std::vector<at::Tensor>& tensors, int64_t root = 0);
  // Rank `root`'s bytes, on every rank.
  std::string broadcast_bytes(const std::string& bytes, int64_t root = 0);
  void barrier();

  // Where ranks disagree (first_difference): the first rank, by number, whose value differs from
  // rank 0's, with its host, and rank 0's.
  struct RankDifference {
    int64_t rank = 0;
    std::string host;
    std::string value;
    std::string chief_host;
    std::string chief_value;
  };
  // Compares every rank's `value` for `topic` (e.g. the training data's description) with rank
  // 0's, through the rendezvous store: nullopt when all agree. A collective: every rank calls it
  // with the same topic, in the same order.
  std::optional<RankDifference> first_difference(const std::string& topic,
                                                 const std::string& value);
  // The host name of `rank` (gethostname), as it reported it when joining.
  std::string host_of(int64_t rank) const;

  // Records that this rank is failing with `message`, where the others look when their
  // collectives fail, and in TORCHELASTIC_ERROR_FILE when torchrun set it. Never throws. With
  // `own_failure` false (another rank's DistributedError) it is recorded apart, so that the
  // group's record keeps naming the rank that failed first and this rank's exit is not taken for
  // a death.
  void report_failure(const std::string& message, bool own_failure = true) noexcept;
  // The DistributedError for a failed collective whose exception said `error`: names the failed
  // rank when it can be told (see the top of this file).
  DistributedError explain_failure(const std::string& what, const std::string& error) const;

  // The c10d process group, for code that calls c10d directly (null for a group of one). The
  // pointer is a c10::intrusive_ptr<c10d::ProcessGroup>* to keep c10d out of this header. Such
  // code runs its collectives inside a Collective scope.
  void* c10d_process_group() const;

  // Marks the code that calls c10d's collectives directly (through c10d_process_group()) as a
  // collective, as ProcessGroup's own are: a peer lost before the scope began is a
  // DistributedError from the constructor (what() names the peer and `what`); one lost while the
  // scope waits ends the process (DistributedOptions::heartbeat_timeout).
  class Collective {
   public:
    Collective(const ProcessGroup& group, const char* what);
    ~Collective();
    Collective(const Collective&) = delete;
    Collective& operator=(const Collective&) = delete;

   private:
    const ProcessGroup& group_;
  };

 private:
  explicit ProcessGroup(std::unique_ptr<detail::ProcessGroupImpl> impl);
  std::unique_ptr<detail::ProcessGroupImpl> impl_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

}  // namespace trainpack
