#include "trainpack/input/shard.h"

#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "trainpack/utils/logger.h"

namespace trainpack {

std::string ShardData::describe() const {
  // Without the rank: every rank resumes the chief's checkpoint, whose input must compare equal.
  return fmt::format("ShardData(world_size={}) over {}", world_size_, ds_->describe());
}

ShardData::ShardData(DataFlowPtr ds, int64_t rank, int64_t world_size)
    : ds_(std::move(ds)), rank_(rank), world_size_(world_size) {
  if (!ds_) throw std::invalid_argument("ShardData: null dataflow; pass the dataflow to shard");
  if (world_size_ < 1) {
    throw std::invalid_argument(fmt::format(
        "ShardData: invalid world_size {}; it is the number of ranks that share the data, at "
        "least 1 (WORLD_SIZE under torchrun)",
        world_size_));
  }
  if (rank_ < 0 || rank_ >= world_size_) {
    throw std::invalid_argument(fmt::format(
        "ShardData: invalid rank {} for world_size {}; the rank must be in [0, {}) (RANK under "
        "torchrun)",
        rank_, world_size_, world_size_));
  }
  const auto n = ds_->size();
  if (!n) return;
  if (*n < world_size_) {
    throw std::invalid_argument(fmt::format(
        "ShardData: the dataflow {} has {} datapoints per pass, fewer than world_size {}, so some "
        "ranks would get none; give it at least {} datapoints or run fewer ranks",
        ds_->name(), *n, world_size_, world_size_));
  }
  if (const int64_t dropped = *n % world_size_; dropped > 0) {
    TP_LOG_INFO(
        "ShardData: rank {} of {} reads {} of the {} datapoints of every pass of {}; the last {} "
        "of every pass are dropped on every rank, so that all ranks take the same number of steps",
        rank_, world_size_, *n / world_size_, *n, ds_->name(), dropped);
  }
}

std::optional<int64_t> ShardData::size() const {
  const auto n = ds_->size();
  if (!n) return std::nullopt;
  return *n / world_size_;
}

std::optional<Datapoint> ShardData::_next() {
  // A flow of known size ends after size() rounds on every rank, without reading the tail.
  if (const auto n = size(); n && position() >= *n) return std::nullopt;
  // One round: the next world_size datapoints of `ds`, of which this rank keeps the rank-th. The
  // round is read whole even after that one: only a complete round may be used, or ranks would
  // end the pass at different steps.
  std::optional<Datapoint> mine;
  for (int64_t i = 0; i < world_size_; ++i) {
    auto dp = ds_->next();
    if (!dp) {
      if (i > 0 && !logged_partial_round_) {
        logged_partial_round_ = true;
        TP_LOG_INFO(
            "ShardData: pass {} of {} ended with {} datapoints after the last full round of {}; "
            "they are dropped on every rank, so that all ranks take the same number of steps",
            pass(), ds_->name(), i, world_size_);
      }
      return std::nullopt;
    }
    if (i == rank_) mine = std::move(dp);
  }
  return mine;
}

void ShardData::_seek(int64_t datapoints_consumed_in_this_pass) {
  if (const auto n = size(); n && datapoints_consumed_in_this_pass > *n) {
    throw std::out_of_range(fmt::format("ShardData: seek to {} past the end of a pass of {}",
                                        datapoints_consumed_in_this_pass, *n));
  }
  if (datapoints_consumed_in_this_pass > std::numeric_limits<int64_t>::max() / world_size_) {
    throw std::out_of_range(
        fmt::format("ShardData: seek to {} is past any pass", datapoints_consumed_in_this_pass));
  }
  ds_->seek(datapoints_consumed_in_this_pass * world_size_);
}

}  // namespace trainpack
