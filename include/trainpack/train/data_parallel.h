// DataParallelTrainer: data-parallel training over a ProcessGroup (tensorpack's HorovodTrainer
// and SyncMultiGPUTrainerReplicated; PyTorch's DistributedDataParallel). docs/distributed.md.
//
//   auto group = trainpack::ProcessGroup::from_environment();   // torchrun's RANK, WORLD_SIZE...
//   trainpack::DataParallelTrainer trainer(group);                // was: SimpleTrainer trainer;
//   trainer.setup_graph(signature, input, net, tower, optimizer_fn);   // unchanged
//   trainer.train_with_defaults(options);                         // unchanged
//
// Every rank runs the tower on its own batch (its part of the global batch: shard the dataflow
// with ShardData); the gradients are averaged over the ranks by c10d's Reducer, the engine of
// PyTorch's DistributedDataParallel: parameters grouped in buckets (bucket_cap_mb), each bucket's
// all-reduce started as soon as its gradients are ready, overlapped with the rest of backward.
// With a group of one process it trains exactly as SimpleTrainer, which it extends.
//
// State: after initialize() (where the chief alone restores a checkpoint; the others log
// tensorpack's "This is not a chief worker, 'session_init' was ignored!"), the chief's
// parameters, buffers, optimizer state, graph variables (the learning rate and other
// hyper-parameters), counters (the resume point), input position and, after a restore, the
// states of the callbacks that run on every rank are broadcast to every rank, so that all start
// where the chief does. With broadcast_every_epoch (tensorpack's
// BROADCAST_EVERY_EPOCH, on by default) the parameters, buffers and graph variables are broadcast
// again before every epoch, which also carries hyper-parameters that only the chief can set
// (from hyper.txt, or from statistics only the chief's monitors hold). Buffers (batch-norm
// statistics) are, as DistributedDataParallel keeps them by default, broadcast from the chief
// before every forward (broadcast_buffers); each rank's batch norm normalises with its own
// batch's statistics (there is no synchronised batch norm).
//
// With gradient accumulation (set_accumulate_steps), the micro-batches before a step's last
// add to each rank's own gradients, as DistributedDataParallel's no_sync(); the last
// micro-batch's backward all-reduces the sums: one all-reduce per optimizer step.
//
// Under NCCL (a CUDA LibTorch), each rank trains on cuda:<local rank> unless given a device.
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
