// DataParallelTrainer: data-parallel training over a ProcessGroup (tensorpack's HorovodTrainer
// and SyncMultiGPUTrainerReplicated; PyTorch's DistributedDataParallel). docs/distributed.md
// shows it in use: a SimpleTrainer program becomes data-parallel by constructing this instead.
//
// Every rank runs the tower on its own batch (its part of the global batch: shard the dataflow
// with ShardData); the gradients are averaged over the ranks by c10d's Reducer, DDP's engine:
// parameters grouped in buckets (bucket_cap_mb), each bucket's all-reduce started as soon as its
// gradients are ready. With a group of one process it trains exactly as SimpleTrainer. Under NCCL
// (a CUDA LibTorch), each rank trains on cuda:<local rank> unless given a device.
//
// State: after initialize() (where the chief alone restores a checkpoint), the chief's parameters,
// buffers, optimizer state, graph variables, counters, input position and, after a restore, the
// states of the callbacks that run on every rank are broadcast to every rank. With
// broadcast_every_epoch (tensorpack's BROADCAST_EVERY_EPOCH) the parameters, buffers and graph
// variables are broadcast again before every epoch (carrying hyper-parameters only the chief
// sets); with broadcast_buffers, the buffers before every forward. Each rank's batch norm
// normalises with its own batch's statistics (no synchronised batch norm). With gradient
// accumulation, one all-reduce per optimizer step, with the last micro-batch's backward.
//
// Differences from tensorpack: gradients are averaged by c10d (tensorpack: Horovod's allreduce or
// NCCL all-reduce ops in the graph); the initial broadcast includes the optimizer state, the
// counters and the input position, which a TF variable broadcast covers implicitly.
#pragma once

#include <memory>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/distributed.h"
#include "trainpack/train/single_cost.h"

namespace trainpack {

struct DataParallelOptions {
  // The size of a gradient bucket (DistributedDataParallel's bucket_cap_mb). The first bucket is
  // 1 MiB, as in DDP, so that the first all-reduce starts early.
  TORCH_ARG(int64_t, bucket_cap_mb) = 25;
  // Broadcast the chief's buffers before every forward (DDP's broadcast_buffers).
  TORCH_ARG(bool, broadcast_buffers) = true;
  // Allow parameters that get no gradient in a step (DDP's find_unused_parameters; costs a
  // traversal of the autograd graph per step).
  TORCH_ARG(bool, find_unused_parameters) = false;
  // Broadcast parameters, buffers and graph variables from the chief before every epoch.
  TORCH_ARG(bool, broadcast_every_epoch) = true;
};

namespace detail {
struct DataParallelState;
}

class DataParallelTrainer : public SimpleTrainer {
 public:
  // `group`: the processes training together (null is std::invalid_argument). `device`: the
  // training device; unset, the CPU under Gloo and cuda:<local rank> under NCCL.
  explicit DataParallelTrainer(ProcessGroupPtr group, DataParallelOptions options = {},
                               std::optional<c10::Device> device = std::nullopt);
  ~DataParallelTrainer() override;

  void run_step() override;

  const DataParallelOptions& options() const { return options_; }

 protected:
  std::vector<CallbackPtr> _setup_graph() override;
  void _after_initialize() override;
  // A world of more than one process trains eager (c10d's Reducer is not captured).
  bool cuda_graph_possible(std::string* why_not) const override;

 private:
  friend class DataParallelSync;
  // Broadcasts parameters and buffers (and, with `variables`, the graph variables) from the
  // chief.
  void broadcast_model(bool variables);
  // After the chief restored a checkpoint: the state() of every callback that runs on every rank,
  // from the chief to the same callbacks elsewhere (load_state).
  void broadcast_callback_states();

  DataParallelOptions options_;
  std::unique_ptr<detail::DataParallelState> state_;
};

}  // namespace trainpack
