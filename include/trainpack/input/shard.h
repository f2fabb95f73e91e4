// ShardData: one rank's part of a dataflow, for data-parallel training (every rank runs the same
// program on its own part of the global batch).
// Public names: ShardData.
//
//   // On every rank: the same list, the same seed, so the same order in every pass.
//   auto all = std::make_shared<DataFromList>(points, DataFromListOptions().shuffle(true).seed(7));
//   auto mine = std::make_shared<ShardData>(all, rank, world_size);
//   auto batches = std::make_shared<BatchData>(mine, global_batch / world_size);
//
// Batch k of rank r then holds the datapoints of the single-process batch k of
// BatchData(all, global_batch) whose index in that batch is r, r + world_size, r + 2 world_size,
// ...: the union over the ranks of their batch k is exactly the single-process batch k, in every
// pass (global_batch must be a multiple of world_size). Per-datapoint work (MapData decoding or
// augmentation) belongs after ShardData: before it, every rank would do it for every datapoint
// and throw away the other ranks' results.
//
// In every pass of `ds`, rank r yields the datapoints at positions p with p % world_size == r,
// and only the first size(ds) / world_size of them (rounded down): every rank yields the same
// number, and the last size(ds) % world_size datapoints of the pass are read by nobody (one INFO
// line at construction says how many). That is PyTorch's DistributedSampler(drop_last=True)
// over one seeded order; ranks must not skip different datapoints, or their step counts would
// differ and the collectives would hang. When size(ds) is unknown, the pass ends on every rank at
// the first round of world_size datapoints that `ds` cannot complete (the partial round is
// dropped; one INFO line the first time).
//
// Every rank reads the whole pass of `ds` (the other ranks' datapoints are read and discarded):
// cheap for DataFromList, which hands out stored tensors. size() is size(ds) / world_size.
// seek(n) seeks `ds` to n * world_size, so a resumed run (FeedInput/QueueInput seek on restore)
// starts every rank exactly where it stood, in O(1) for a flow that seeks; ShardData seeks iff
// `ds` does. reset_state() forwards.
//
// world_size < 1, a rank outside [0, world_size), a null `ds` and a `ds` of known size smaller
// than world_size are std::invalid_argument naming ShardData, the argument and its value.
//
// Differences from tensorpack: tensorpack has no sharding dataflow; under its HorovodTrainer
// every process reads its whole dataflow, asked only to have "reasonable randomness" (a
// different order per process), so ranks overlap and an epoch is not one pass over the data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trainpack/input/dataflow.h"

namespace trainpack {

class ShardData : public DataFlow {
 public:
  ShardData(DataFlowPtr ds, int64_t rank, int64_t world_size);
  std::string name() const override { return "ShardData"; }
  std::string describe() const override;
  void reset_state() override { ds_->reset_state(); }
  std::optional<int64_t> size() const override;
  const DataFlow* first_unseekable() const override { return ds_->first_unseekable(); }

  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }

 protected:
  void _begin_pass(int64_t pass) override { ds_->begin_pass(pass); }
  std::optional<Datapoint> _next() override;
  void _seek(int64_t datapoints_consumed_in_this_pass) override;

 private:
  DataFlowPtr ds_;
  int64_t rank_;
  int64_t world_size_;
  bool logged_partial_round_ = false;
};

}  // namespace trainpack
