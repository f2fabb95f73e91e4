// The main job under torchrun (docs/distributed.md): what differs when several processes (ranks)
// train together. One rank, the chief (rank 0), owns --logdir and decides the run's verdict; the
// others train with it and exit with the status it decided.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainpack/trainpack.h"

namespace fashion_mnist {

// The default of --threads: the hardware threads shared by the ranks on this machine (torchrun's
// LOCAL_WORLD_SIZE), at least 1. With 2 ranks on 2 cores each rank gets 1 thread: 2 threads each
// would make every step wait for threads that share a core (and intra-op threads do not help a
// rank whose peers have the other cores busy).
inline int default_threads(unsigned hardware_threads, int64_t local_ranks) {
  return static_cast<int>(std::max<int64_t>(
      1, static_cast<int64_t>(hardware_threads) / std::max<int64_t>(1, local_ranks)));
}

// Why `batch_size` (the global batch) cannot be split over `world_size` ranks, or nullopt when it
// can: every rank takes an equal part of each batch (ShardData), so it must be a multiple.
inline std::optional<std::string> batch_size_problem(int64_t batch_size, int64_t world_size) {
  if (batch_size % world_size == 0) return std::nullopt;
  const int64_t lower = std::max<int64_t>(world_size, batch_size / world_size * world_size);
  return fmt::format(
      "--batch-size {} is not a multiple of the {} ranks training together (WORLD_SIZE {}): "
      "--batch-size is the global batch, split equally over the ranks. Give a multiple of {} "
      "(e.g. {} or {})",
      batch_size, world_size, world_size, world_size, lower, lower + world_size);
}

// The run's exit status on every rank: the chief's `status`, sent to the others (whose own
// argument is ignored). Called by every rank once training has ended on all of them. When the
// exchange fails (a rank died after training), the failure is logged and the status is 1.
inline int share_chief_status(trainpack::ProcessGroup& group, int status) {
  if (!group.distributed()) return status;
  try {
    std::vector<at::Tensor> value{torch::full({1}, group.is_chief() ? status : 0, torch::kInt64)};
    group.broadcast(value, /*root=*/0);
    return static_cast<int>(value[0].item<int64_t>());
  } catch (const std::exception& e) {
    TP_LOG_ERROR("fashion_mnist: the ranks could not agree on the exit status after training: {}",
                 e.what());
    return 1;
  }
}

}  // namespace fashion_mnist
