// ShardData: one rank's part of a dataflow, for data-parallel training (tensorpack has none,
// docs/tensorpack-differences.md #37). docs/input.md, "Sharding over ranks", shows it in use.
//
// In every pass of `ds`, rank r yields the datapoints at positions p with p % world_size == r,
// and only the first size(ds) / world_size of them (rounded down): every rank yields the same
// number (or the collectives would hang), and the last size(ds) % world_size datapoints of the
// pass are read by nobody (one INFO line at construction says how many), as PyTorch's
// DistributedSampler(drop_last=True) does over one seeded order. With a batch size of
// global_batch / world_size, the ranks' batches k together are the single-process batch k. When
// size(ds) is unknown, the pass ends on every rank at the first round of world_size datapoints
// that `ds` cannot complete (the partial round is dropped; one INFO line the first time).
//
// Every rank reads the whole pass of `ds` and discards the other ranks' datapoints, so
// per-datapoint work (MapData) belongs after ShardData. size() is size(ds) / world_size. seek(n)
// seeks `ds` to n * world_size; ShardData seeks iff `ds` does. reset_state() forwards.
// world_size < 1, a rank outside [0, world_size), a null `ds` and a `ds` of known size smaller
// than world_size are std::invalid_argument naming ShardData, the argument and its value.
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
