// ShardData: each rank's part of one seeded order. The ranks together read exactly what one
// process reads (batch by batch, through BatchData of the global batch over the world size),
// in disjoint parts of equal size, and every rank resumes exactly where it stood.
#include "trainpack/input/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/Functions.h>

#include "support/errors.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace shard_data_test {

using testing::LogCapture;
using testing::message_of;

// Datapoint i is {i, [i, -i] as float}: two components, one of them not a scalar, so that
// batches stack real tensors.
std::vector<Datapoint> points(int64_t n) {
  std::vector<Datapoint> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back({at::scalar_tensor(i, at::kLong),
                   at::tensor({static_cast<float>(i), static_cast<float>(-i)})});
  }
  return out;
}

DataFlowPtr shuffled(int64_t n, uint64_t seed = 11) {
  return std::make_shared<DataFromList>(points(n), DataFromListOptions().shuffle(true).seed(seed));
}

// The ids (first component) of every datapoint left in the current pass.
std::vector<int64_t> drain(DataFlow& ds) {
  std::vector<int64_t> out;
  while (auto dp = ds.next()) out.push_back((*dp)[0].item<int64_t>());
  return out;
}

// The batches left in the current pass, each as the ids of its datapoints.
std::vector<std::vector<int64_t>> drain_batches(DataFlow& ds) {
  std::vector<std::vector<int64_t>> out;
  while (auto batch = ds.next()) {
    const at::Tensor ids = (*batch)[0];
    EXPECT_TRUE(at::equal((*batch)[1].select(1, 0), ids.to(at::kFloat)));  // components agree
    out.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
  }
  return out;
}

// The union over the ranks of their batch k is the single-process batch k: rank r's batch k
// holds the entries r, r + world, r + 2 world, ... of it, in every pass, with shuffle.
TEST(ShardData, UnionOverRanksOfEachBatchIsTheSingleProcessBatch) {
  const int64_t n = 50;  // not a multiple of the global batch nor of the world size
  const int64_t global_batch = 6;
  for (int64_t world : {2, 3}) {
    SCOPED_TRACE("world_size " + std::to_string(world));
    BatchData single(shuffled(n), global_batch);
    std::vector<std::shared_ptr<BatchData>> ranks;
    for (int64_t r = 0; r < world; ++r) {
      ranks.push_back(std::make_shared<BatchData>(
          std::make_shared<ShardData>(shuffled(n), r, world), global_batch / world));
    }
    single.reset_state();
    for (auto& ds : ranks) ds->reset_state();
    for (int pass = 0; pass < 4; ++pass) {
      SCOPED_TRACE("pass " + std::to_string(pass));
      single.begin_pass();
      const auto expected = drain_batches(single);
      ASSERT_EQ(static_cast<int64_t>(expected.size()), n / global_batch);
      std::vector<std::vector<std::vector<int64_t>>> got;  // [rank][batch][i]
      for (auto& ds : ranks) {
        ds->begin_pass();
        EXPECT_EQ(ds->pass(), pass);
        got.push_back(drain_batches(*ds));
        ASSERT_EQ(got.back().size(), expected.size());
        EXPECT_EQ(ds->size(), single.size());
      }
      for (size_t k = 0; k < expected.size(); ++k) {
        std::vector<int64_t> merged(static_cast<size_t>(global_batch));
        for (int64_t r = 0; r < world; ++r) {
          const auto& part = got[static_cast<size_t>(r)][k];
          ASSERT_EQ(static_cast<int64_t>(part.size()), global_batch / world);
          for (size_t i = 0; i < part.size(); ++i) {
            merged[i * static_cast<size_t>(world) + static_cast<size_t>(r)] = part[i];
          }
        }
        EXPECT_EQ(merged, expected[k]) << "batch " << k;
      }
    }
  }
}

// Disjoint, equal parts of one order: rank r takes the positions p with p % world == r, the
// tail of size % world positions goes to nobody; a new pass is a new order.
TEST(ShardData, RanksReadDisjointEqualPartsAndNobodyReadsTheTail) {
  const int64_t n = 11;
  const int64_t world = 3;
  DataFromList reference(points(n), DataFromListOptions().shuffle(true).seed(11));
  std::vector<std::shared_ptr<ShardData>> ranks;
  for (int64_t r = 0; r < world; ++r) {
    ranks.push_back(std::make_shared<ShardData>(shuffled(n), r, world));
    EXPECT_EQ(ranks.back()->size(), 3);
    EXPECT_EQ(ranks.back()->rank(), r);
    EXPECT_EQ(ranks.back()->world_size(), world);
  }
  std::vector<int64_t> first_pass_of_rank0;
  for (int64_t pass = 0; pass < 3; ++pass) {
    const auto order = reference.order_of_pass(pass);
    std::set<int64_t> seen;
    for (int64_t r = 0; r < world; ++r) {
      ranks[static_cast<size_t>(r)]->begin_pass(pass);
      const auto mine = drain(*ranks[static_cast<size_t>(r)]);
      ASSERT_EQ(mine.size(), 3u);
      for (size_t i = 0; i < mine.size(); ++i) {
        EXPECT_EQ(mine[i], order[i * world + static_cast<size_t>(r)]);
        EXPECT_TRUE(seen.insert(mine[i]).second) << mine[i] << " read by two ranks";
      }
      if (pass == 0 && r == 0) first_pass_of_rank0 = mine;
      if (pass == 1 && r == 0) {
        EXPECT_NE(mine, first_pass_of_rank0);  // reshuffled
      }
    }
    EXPECT_EQ(seen.size(), 9u);
    for (size_t p = 9; p < order.size(); ++p) EXPECT_EQ(seen.count(order[p]), 0u);
  }
}

TEST(ShardData, WorldSizeOneIsTheFlowItself) {
  ShardData ds(shuffled(7), 0, 1);
  DataFromList reference(points(7), DataFromListOptions().shuffle(true).seed(11));
  EXPECT_EQ(ds.size(), 7);
  for (int64_t pass = 0; pass < 2; ++pass) {
    ds.begin_pass();
    reference.begin_pass();
    EXPECT_EQ(drain(ds), drain(reference));
  }
}

// As DistributedSampler(drop_last=True), the dropped tail is said once: at construction, with
// the count; nothing when nothing is dropped.
TEST(ShardData, SaysOnceHowManyDatapointsAreDropped) {
  {
    LogCapture log;
    ShardData ds(shuffled(11), 1, 4);
    ds.reset_state();
    for (int pass = 0; pass < 3; ++pass) {
      ds.begin_pass();
      drain(ds);
    }
    const auto& lines = log.lines();
    ASSERT_EQ(lines.size(), 1u) << (lines.empty() ? "" : lines.back());
    EXPECT_EQ(lines[0],
              "ShardData: rank 1 of 4 reads 2 of the 11 datapoints of every pass of DataFromList; "
              "the last 3 of every pass are dropped on every rank, so that all ranks take the same "
              "number of steps");
  }
  {
    LogCapture log;
    ShardData ds(shuffled(12), 1, 4);
    ds.begin_pass();
    EXPECT_EQ(drain(ds).size(), 3u);
    EXPECT_TRUE(log.lines().empty());
  }
}

// seek(n) then reading gives what reading n datapoints and going on gives, for every n of a
// pass (n = size() included: the pass is over), in a later pass too; and so does BatchData over
// ShardData, which is what FeedInput and QueueInput seek on resume.
TEST(ShardData, SeekThenReadEqualsReadingOn) {
  const int64_t n = 23;
  const int64_t world = 3;
  for (int64_t r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ShardData full(shuffled(n), r, world);
    ASSERT_TRUE(full.seekable());
    full.begin_pass(2);
    const auto all = drain(full);
    ASSERT_EQ(static_cast<int64_t>(all.size()), n / world);
    for (int64_t at = 0; at <= n / world; ++at) {
      ShardData resumed(shuffled(n), r, world);
      resumed.reset_state();
      resumed.begin_pass(2);
      resumed.seek(at);
      EXPECT_EQ(resumed.position(), at);
      EXPECT_EQ(drain(resumed), std::vector<int64_t>(all.begin() + at, all.end())) << "at " << at;
      resumed.begin_pass();  // and the next pass is the uninterrupted run's next pass
      full.begin_pass(3);
      EXPECT_EQ(drain(resumed), drain(full));
    }
    ShardData past(shuffled(n), r, world);
    past.begin_pass(0);
    EXPECT_THROW(past.seek(n / world + 1), std::out_of_range);

    const int64_t batch = 2;
    BatchData batches(std::make_shared<ShardData>(shuffled(n), r, world), batch);
    ASSERT_TRUE(batches.seekable());
    batches.begin_pass(1);
    const auto all_batches = drain_batches(batches);
    ASSERT_EQ(static_cast<int64_t>(all_batches.size()), n / world / batch);
    for (int64_t at = 0; at <= static_cast<int64_t>(all_batches.size()); ++at) {
      BatchData resumed(std::make_shared<ShardData>(shuffled(n), r, world), batch);
      resumed.begin_pass(1);
      resumed.seek(at);
      EXPECT_EQ(drain_batches(resumed),
                std::vector<std::vector<int64_t>>(all_batches.begin() + at, all_batches.end()))
          << "batch " << at;
    }
  }
}

// A flow that cannot seek makes ShardData one that cannot either, naming the flow inside.
TEST(ShardData, SeeksExactlyWhenTheFlowItWrapsSeeks) {
  auto gen = std::make_shared<DataFromGenerator>(
      []() -> std::optional<Datapoint> { return Datapoint{at::scalar_tensor(0)}; });
  ShardData ds(gen, 0, 2);
  EXPECT_FALSE(ds.seekable());
  EXPECT_EQ(ds.first_unseekable(), gen.get());
  ds.begin_pass();
  EXPECT_EQ(message_of<std::logic_error>([&] { ds.seek(1); }),
            "DataFromGenerator does not support seek");
}

// A generator of `n` datapoints per pass (it restarts when a pass ends), of unknown size unless
// `known` is set.
DataFlowPtr counting_generator(int64_t n, std::optional<int64_t> known = std::nullopt) {
  return std::make_shared<DataFromGenerator>(
      [n, i = int64_t{0}]() mutable -> std::optional<Datapoint> {
        if (i == n) {
          i = 0;
          return std::nullopt;
        }
        return Datapoint{at::scalar_tensor(i++, at::kLong)};
      },
      known);
}

// Without a known size, every rank ends the pass at the first round of world_size datapoints
// that the flow cannot complete: the same number of datapoints on every rank, the partial round
// dropped (and said once).
TEST(ShardData, UnknownSizeEndsEveryRankAtTheFirstIncompleteRound) {
  const int64_t world = 4;
  LogCapture log;
  for (int64_t r = 0; r < world; ++r) {
    ShardData ds(counting_generator(10), r, world);
    EXPECT_EQ(ds.size(), std::nullopt);
    for (int pass = 0; pass < 3; ++pass) {
      ds.begin_pass();
      EXPECT_EQ(drain(ds), (std::vector<int64_t>{r, r + world})) << "rank " << r;
      EXPECT_FALSE(ds.next().has_value());
    }
  }
  // One line per rank (each rank is its own process in a real run), naming the dropped count.
  ASSERT_EQ(log.lines().size(), static_cast<size_t>(world));
  EXPECT_EQ(log.lines()[0],
            "ShardData: pass 0 of DataFromGenerator ended with 2 datapoints after the last full "
            "round of 4; they are dropped on every rank, so that all ranks take the same number "
            "of steps");

  LogCapture exact;
  ShardData ds(counting_generator(8), 3, world);
  ds.begin_pass();
  EXPECT_EQ(drain(ds), (std::vector<int64_t>{3, 7}));
  EXPECT_TRUE(exact.lines().empty());
}

// A known size is trusted for the end of the pass: the tail is never read.
TEST(ShardData, KnownSizeEndsThePassWithoutReadingTheTail) {
  int64_t calls = 0;
  auto gen = std::make_shared<DataFromGenerator>(
      [&calls]() -> std::optional<Datapoint> {
        if (calls == 100) return std::nullopt;  // more than its size says, but not forever
        return Datapoint{at::scalar_tensor(calls++, at::kLong)};
      },
      7);
  ShardData ds(gen, 1, 3);
  EXPECT_EQ(ds.size(), 2);
  ds.begin_pass();
  EXPECT_EQ(drain(ds), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(calls, 6);
}

// A flow that is shorter than its size says (MapData that drops) still ends every rank at the
// same round.
TEST(ShardData, AFlowShorterThanItsSizeEndsAtTheFirstIncompleteRound) {
  auto odd = std::make_shared<MapData>(shuffled(12), [](Datapoint dp) -> std::optional<Datapoint> {
    if (dp[0].item<int64_t>() % 2 == 0) return std::nullopt;
    return dp;
  });
  std::set<int64_t> seen;
  for (int64_t r = 0; r < 4; ++r) {
    ShardData ds(odd, r, 4);
    EXPECT_EQ(ds.size(), 3);  // an upper bound, as MapData's own
    ds.begin_pass();
    const auto mine = drain(ds);
    EXPECT_EQ(mine.size(), 1u);  // 6 odd datapoints: one full round of 4
    for (auto id : mine) EXPECT_TRUE(seen.insert(id).second);
  }
}

class CountingResets : public DataFlow {
 public:
  std::string name() const override { return "CountingResets"; }
  void reset_state() override { ++resets; }
  std::optional<int64_t> size() const override { return 4; }
  int resets = 0;

 protected:
  void _begin_pass(int64_t) override {}
  std::optional<Datapoint> _next() override { return std::nullopt; }
};

TEST(ShardData, ForwardsResetState) {
  auto inner = std::make_shared<CountingResets>();
  ShardData ds(inner, 0, 2);
  ds.reset_state();
  EXPECT_EQ(inner->resets, 1);
}

TEST(ShardData, BadArgumentsSayWhatIsWrongAndWhatToDo) {
  auto ds = shuffled(10);
  EXPECT_EQ(message_of<std::invalid_argument>([&] { ShardData(ds, 0, 0); }),
            "ShardData: invalid world_size 0; it is the number of ranks that share the data, at "
            "least 1 (WORLD_SIZE under torchrun)");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { ShardData(ds, 0, -2); }),
            "ShardData: invalid world_size -2; it is the number of ranks that share the data, at "
            "least 1 (WORLD_SIZE under torchrun)");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { ShardData(ds, -1, 2); }),
            "ShardData: invalid rank -1 for world_size 2; the rank must be in [0, 2) (RANK under "
            "torchrun)");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { ShardData(ds, 2, 2); }),
            "ShardData: invalid rank 2 for world_size 2; the rank must be in [0, 2) (RANK under "
            "torchrun)");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { ShardData(nullptr, 0, 2); }),
            "ShardData: null dataflow; pass the dataflow to shard");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { ShardData(shuffled(2), 0, 3); }),
            "ShardData: the dataflow DataFromList has 2 datapoints per pass, fewer than "
            "world_size 3, so some ranks would get none; give it at least 3 datapoints or run "
            "fewer ranks");
  EXPECT_NO_THROW(ShardData(shuffled(3), 2, 3));
  EXPECT_NO_THROW(ShardData(counting_generator(1), 2, 3));  // unknown size: checked per pass
}

}  // namespace shard_data_test
}  // namespace trainpack
