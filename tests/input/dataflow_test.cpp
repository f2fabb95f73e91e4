#include "trainpack/input/dataflow.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Functions.h>

#include "support/errors.h"

namespace trainpack {
namespace dataflow_test {

std::vector<Datapoint> scalars(int64_t n) {
  std::vector<Datapoint> points;
  for (int64_t i = 0; i < n; ++i) points.push_back({at::scalar_tensor(i, at::kLong)});
  return points;
}

// The first component of every datapoint of the current pass, from its current position.
std::vector<int64_t> drain(DataFlow& ds) {
  std::vector<int64_t> out;
  while (auto dp = ds.next()) out.push_back((*dp)[0].item<int64_t>());
  return out;
}

std::vector<int64_t> one_pass(DataFlow& ds) {
  ds.begin_pass();
  return drain(ds);
}

using testing::message_of;

TEST(DataFromList, WithoutShuffleEveryPassIsTheListInOrder) {
  DataFromList ds(scalars(5));
  ds.reset_state();
  EXPECT_EQ(ds.size(), 5);
  EXPECT_EQ(one_pass(ds), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ds.pass(), 0);
  EXPECT_EQ(ds.position(), 5);
  EXPECT_FALSE(ds.next().has_value());  // stays ended
  EXPECT_EQ(one_pass(ds), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ds.pass(), 1);
}

TEST(DataFromList, ShuffleIsAPureFunctionOfSeedAndPass) {
  const auto opts = DataFromListOptions().shuffle(true).seed(42);
  DataFromList a(scalars(20), opts);
  DataFromList b(scalars(20), opts);
  const auto a0 = one_pass(a);
  const auto a1 = one_pass(a);
  EXPECT_EQ(a0, one_pass(b));
  EXPECT_EQ(a1, one_pass(b));
  EXPECT_NE(a0, a1);  // a new pass, a new order
  std::vector<int64_t> sorted = a0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, DataFromList(scalars(20)).order_of_pass(0));  // a permutation
  EXPECT_NE(a0, DataFromList(scalars(20)).order_of_pass(0));

  // Starting pass 1 directly gives pass 1's order.
  DataFromList c(scalars(20), opts);
  c.begin_pass(1);
  EXPECT_EQ(drain(c), a1);
  // Another seed, another order.
  DataFromList d(scalars(20), DataFromListOptions().shuffle(true).seed(43));
  EXPECT_NE(one_pass(d), a0);
}

TEST(DataFromList, ShuffledOrderIsFixedAcrossBuilds) {
  // The order is hand-written Fisher-Yates over std::mt19937_64: the same everywhere. A change
  // of this sequence breaks the exact resume of old checkpoints.
  DataFromList ds(scalars(8), DataFromListOptions().shuffle(true).seed(1));
  EXPECT_EQ(ds.order_of_pass(0), (std::vector<int64_t>{5, 2, 1, 4, 3, 6, 0, 7}));
  EXPECT_EQ(ds.order_of_pass(1), (std::vector<int64_t>{1, 2, 7, 5, 6, 4, 0, 3}));
}

TEST(DataFromList, SeekThenNextContinuesTheUninterruptedPass) {
  const auto opts = DataFromListOptions().shuffle(true).seed(7);
  DataFromList full(scalars(10), opts);
  full.begin_pass(3);
  const auto pass3 = drain(full);
  for (int64_t k = 0; k <= 10; ++k) {
    DataFromList resumed(scalars(10), opts);
    resumed.begin_pass(3);
    resumed.seek(k);
    EXPECT_EQ(resumed.position(), k);
    const auto rest = drain(resumed);
    EXPECT_EQ(rest, std::vector<int64_t>(pass3.begin() + k, pass3.end())) << "k=" << k;
  }
}

TEST(DataFromList, SeekErrors) {
  DataFromList ds(scalars(3));
  EXPECT_THROW(ds.seek(0), std::logic_error);
  EXPECT_THROW(ds.next(), std::logic_error);
  ds.begin_pass();
  EXPECT_THROW(ds.seek(-1), std::invalid_argument);
  EXPECT_THROW(ds.seek(4), std::out_of_range);
}

TEST(DataFromGenerator, CallsTheFunctionUntilNullopt) {
  int calls = 0;
  DataFromGenerator ds([&calls]() -> std::optional<Datapoint> {
    ++calls;
    if (calls > 3) return std::nullopt;
    return Datapoint{at::scalar_tensor(calls * 10, at::kLong)};
  });
  EXPECT_FALSE(ds.size().has_value());
  EXPECT_EQ(one_pass(ds), (std::vector<int64_t>{10, 20, 30}));
  EXPECT_FALSE(ds.next().has_value());
  EXPECT_EQ(calls, 4);  // not called again after the end of the pass
  EXPECT_EQ(DataFromGenerator([] { return std::optional<Datapoint>(); }, 12).size(), 12);
}

TEST(DataFromGenerator, SeekIsNotSupported) {
  DataFromGenerator ds([] { return std::optional<Datapoint>(); });
  ds.begin_pass();
  EXPECT_EQ(message_of([&] { ds.seek(1); }), "DataFromGenerator does not support seek");
}

TEST(DataFlow, AnExceptionInsideTheFlowPropagatesWithItsMessage) {
  auto gen = std::make_shared<DataFromGenerator>(
      []() -> std::optional<Datapoint> { throw std::runtime_error("disk on fire"); });
  BatchData batches(std::make_shared<MapData>(gen, [](Datapoint dp) { return dp; }), 2);
  batches.begin_pass();
  EXPECT_EQ(message_of([&] { batches.next(); }), "disk on fire");
}

TEST(DataExhausted, IsAStopTraining) {
  try {
    throw DataExhausted("no more");
  } catch (const StopTraining& e) {
    EXPECT_STREQ(e.what(), "no more");
  }
}

TEST(BatchData, StacksEachComponentAlongANewDimZero) {
  std::vector<Datapoint> points;
  for (int64_t i = 0; i < 5; ++i) {
    points.push_back(
        {at::full({2, 3}, static_cast<double>(i), at::kFloat), at::scalar_tensor(i, at::kLong)});
  }
  BatchData ds(std::make_shared<DataFromList>(points), 2);
  ds.reset_state();
  EXPECT_EQ(ds.size(), 2);
  ds.begin_pass();
  auto b0 = ds.next();
  ASSERT_TRUE(b0.has_value());
  ASSERT_EQ(b0->size(), 2u);
  EXPECT_EQ((*b0)[0].sizes(), (at::IntArrayRef{2, 2, 3}));
  EXPECT_EQ((*b0)[0].scalar_type(), at::kFloat);
  EXPECT_EQ((*b0)[1].sizes(), (at::IntArrayRef{2}));
  EXPECT_EQ((*b0)[1][1].item<int64_t>(), 1);
  EXPECT_EQ((*b0)[0][1][1][2].item<float>(), 1.0f);
  auto b1 = ds.next();
  ASSERT_TRUE(b1.has_value());
  EXPECT_EQ((*b1)[1][0].item<int64_t>(), 2);
  EXPECT_FALSE(ds.next().has_value());  // the remainder (one point) is dropped
  EXPECT_EQ(ds.position(), 2);
}

TEST(BatchData, RemainderGivesTheLastSmallerBatch) {
  BatchData ds(std::make_shared<DataFromList>(scalars(5)), 2, /*remainder=*/true);
  EXPECT_EQ(ds.size(), 3);
  ds.begin_pass();
  std::vector<int64_t> sizes;
  while (auto b = ds.next()) sizes.push_back((*b)[0].size(0));
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(BatchData(std::make_shared<DataFromList>(scalars(4)), 2, true).size(), 2);
  EXPECT_FALSE(
      BatchData(std::make_shared<DataFromGenerator>([] { return std::optional<Datapoint>(); }), 2)
          .size()
          .has_value());
}

TEST(BatchData, InvalidBatchSize) {
  auto list = std::make_shared<DataFromList>(scalars(2));
  EXPECT_EQ(message_of([&] { BatchData(list, 0); }), "BatchData: invalid batch_size 0");
  EXPECT_THROW(BatchData(list, -3), std::invalid_argument);
}

TEST(BatchData, ShapeMismatchNamesTheComponentAndBothShapes) {
  std::vector<Datapoint> points = {{at::zeros({1}), at::zeros({2, 3})},
                                   {at::zeros({1}), at::zeros({3, 2})}};
  BatchData ds(std::make_shared<DataFromList>(points), 2);
  ds.begin_pass();
  EXPECT_EQ(message_of([&] { ds.next(); }),
            "BatchData: component 1 has shape [3, 2] in datapoint 1 of the batch but [2, 3] in "
            "the first");
  try {
    ds.begin_pass();
    ds.next();
    FAIL();
  } catch (const std::invalid_argument&) {
  }
}

TEST(BatchData, SeekSkipsWholeBatches) {
  const auto opts = DataFromListOptions().shuffle(true).seed(3);
  BatchData full(std::make_shared<DataFromList>(scalars(12), opts), 3);
  full.begin_pass(2);
  std::vector<at::Tensor> all;
  while (auto b = full.next()) all.push_back((*b)[0]);
  BatchData resumed(std::make_shared<DataFromList>(scalars(12), opts), 3);
  resumed.begin_pass(2);
  resumed.seek(2);
  auto b = resumed.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE((*b)[0].equal(all[2]));
  EXPECT_EQ(resumed.position(), 3);
}

TEST(BatchData, SeekToThePassSizeEndsThePassAlsoWithRemainder) {
  for (bool remainder : {false, true}) {
    SCOPED_TRACE(remainder);
    BatchData ds(std::make_shared<DataFromList>(scalars(7)), 3, remainder);
    ds.begin_pass(1);
    ds.seek(*ds.size());  // 2 batches, or 3 with the short one
    EXPECT_EQ(ds.position(), *ds.size());
    EXPECT_FALSE(ds.next().has_value());
    ds.begin_pass();
    auto b = ds.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE((*b)[0].equal(at::tensor({0, 1, 2}, at::kLong)));
    EXPECT_EQ(ds.pass(), 2);
  }
  // With remainder, seeking to the short last batch still gives it.
  BatchData ds(std::make_shared<DataFromList>(scalars(7)), 3, /*remainder=*/true);
  ds.begin_pass(0);
  ds.seek(2);
  auto b = ds.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE((*b)[0].equal(at::tensor({6}, at::kLong)));
}

TEST(DataFlow, SeekableTellsWhichFlowCannotSeek) {
  auto list = std::make_shared<DataFromList>(scalars(4));
  auto gen = std::make_shared<DataFromGenerator>([] { return std::optional<Datapoint>(); });
  auto identity = [](Datapoint dp) -> std::optional<Datapoint> { return dp; };
  EXPECT_TRUE(list->seekable());
  EXPECT_EQ(list->first_unseekable(), nullptr);
  EXPECT_TRUE(BatchData(list, 2).seekable());
  EXPECT_TRUE(MapData(std::make_shared<BatchData>(list, 2), identity).seekable());
  EXPECT_FALSE(gen->seekable());
  EXPECT_EQ(gen->first_unseekable(), gen.get());
  BatchData over_gen(std::make_shared<MapData>(gen, identity), 2);
  EXPECT_FALSE(over_gen.seekable());
  EXPECT_EQ(over_gen.first_unseekable(), gen.get());  // the flow to blame, inside the wrappers
}

TEST(MapData, AppliesTheFunctionAndDropsOnNullopt) {
  auto list = std::make_shared<DataFromList>(scalars(6));
  MapData ds(list, [](Datapoint dp) -> std::optional<Datapoint> {
    const int64_t v = dp[0].item<int64_t>();
    if (v % 2 == 1) return std::nullopt;
    return Datapoint{at::scalar_tensor(v * 100, at::kLong)};
  });
  EXPECT_EQ(ds.size(), 6);  // tensorpack keeps len(ds)
  EXPECT_EQ(one_pass(ds), (std::vector<int64_t>{0, 200, 400}));
  EXPECT_EQ(ds.position(), 3);
}

TEST(MapData, AContextFuncGetsThePassAndTheInputPosition) {
  std::vector<std::pair<int64_t, int64_t>> seen;  // (pass, position) of every call
  MapData ds(std::make_shared<DataFromList>(scalars(6)),
             [&seen](Datapoint dp, const MapContext& c) -> std::optional<Datapoint> {
               seen.emplace_back(c.pass, c.position);
               const int64_t v = dp[0].item<int64_t>();
               if (v == 1) return std::nullopt;  // a drop still counts as an input
               return Datapoint{at::scalar_tensor(c.pass * 100 + c.position * 10 + v, at::kLong)};
             });
  ds.begin_pass(3);
  EXPECT_EQ(drain(ds), (std::vector<int64_t>{300, 322, 333, 344, 355}));
  EXPECT_EQ(ds.position(), 5);
  ds.begin_pass();  // pass 4
  ASSERT_TRUE(ds.next().has_value());
  ds.seek(4);
  EXPECT_EQ(drain(ds), (std::vector<int64_t>{444, 455}));
  ds.begin_pass(1);
  ds.seek(6);  // the end of the pass
  EXPECT_FALSE(ds.next().has_value());
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{
                      {3, 0}, {3, 1}, {3, 2}, {3, 3}, {3, 4}, {3, 5}, {4, 0}, {4, 4}, {4, 5}}));
}

TEST(MapData, RefusesAnEmptyFunctionOfEitherForm) {
  auto list = std::make_shared<DataFromList>(scalars(2));
  EXPECT_EQ(message_of<std::invalid_argument>([&] { MapData(list, MapData::Func()); }),
            "MapData: empty function");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { MapData(list, MapData::ContextFunc()); }),
            "MapData: empty function");
}

}  // namespace dataflow_test
}  // namespace trainpack
