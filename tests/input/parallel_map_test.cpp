#include "trainpack/input/parallel_map.h"

#include <gtest/gtest.h>

#include <ATen/Config.h>
#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/errors.h"

namespace trainpack {
namespace parallel_map_test {

using testing::message_of;

// A file that does not decode: an error type of the test's own, to see that the exception object
// itself arrives (not a copy of its message in another type).
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::shared_ptr<DataFromList> scalars(int64_t n, DataFromListOptions options = {}) {
  std::vector<Datapoint> points;
  for (int64_t i = 0; i < n; ++i) points.push_back({at::scalar_tensor(i, at::kLong)});
  return std::make_shared<DataFromList>(std::move(points), options);
}

int64_t value_of(const Datapoint& dp) { return dp[0].item<int64_t>(); }

// Every component (scalars) of every datapoint from the current position to the pass's end.
std::vector<std::vector<int64_t>> drain_rows(DataFlow& ds) {
  std::vector<std::vector<int64_t>> rows;
  while (auto dp = ds.next()) {
    std::vector<int64_t> row;
    for (const auto& t : *dp) row.push_back(t.item<int64_t>());
    rows.push_back(row);
  }
  return rows;
}

std::vector<int64_t> drain(DataFlow& ds) {
  std::vector<int64_t> out;
  while (auto dp = ds.next()) out.push_back(value_of(*dp));
  return out;
}

// A delay of 0 to 2 ms that depends on the value: later inputs often finish first.
void delay_for(int64_t v) {
  const uint64_t h = (static_cast<uint64_t>(v) + 1) * 0x9e3779b97f4a7c15ULL;
  std::this_thread::sleep_for(std::chrono::microseconds((h >> 40) % 2000));
}

// (value, pass, position) of each input, dropping the values that are 3 modulo 5, with a delay.
std::optional<Datapoint> tagged(Datapoint dp, const MapContext& c) {
  const int64_t v = value_of(dp);
  delay_for(v);
  if (v % 5 == 3) return std::nullopt;
  return Datapoint{dp[0], at::scalar_tensor(c.pass, at::kLong),
                   at::scalar_tensor(c.position, at::kLong)};
}

std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> r;
  for (int64_t i = from; i < to; ++i) r.push_back(i);
  return r;
}

class ThreadCounts : public ::testing::TestWithParam<int64_t> {};

TEST_P(ThreadCounts, KeepsTheInputOrderUnderRandomDelays) {
  MultiThreadMapData ds(
      scalars(60), GetParam(),
      [](Datapoint dp) -> std::optional<Datapoint> {
        delay_for(value_of(dp));
        return Datapoint{at::mul(dp[0], 10)};
      },
      MultiThreadMapDataOptions().buffer_size(std::max<int64_t>(GetParam(), 16)));
  for (int pass = 0; pass < 2; ++pass) {
    ds.begin_pass();
    std::vector<int64_t> expected;
    for (int64_t v : range(0, 60)) expected.push_back(v * 10);
    EXPECT_EQ(drain(ds), expected);
    EXPECT_EQ(ds.position(), 60);
    EXPECT_FALSE(ds.next().has_value());  // stays ended
  }
}

TEST_P(ThreadCounts, GivesTheSameSequenceAsMapDataWithTheContext) {
  const auto opts = DataFromListOptions().shuffle(true).seed(3);
  MapData serial(scalars(40, opts), tagged);
  MultiThreadMapData parallel(scalars(40, opts), GetParam(), tagged,
                              MultiThreadMapDataOptions().buffer_size(GetParam() + 3));
  for (int64_t pass : {0, 1, 5}) {
    serial.begin_pass(pass);
    parallel.begin_pass(pass);
    const auto expected = drain_rows(serial);
    EXPECT_EQ(expected.size(), 32u);  // 8 of 40 dropped
    EXPECT_EQ(drain_rows(parallel), expected);
    EXPECT_EQ(parallel.position(), serial.position());
  }
}

INSTANTIATE_TEST_SUITE_P(MultiThreadMapData, ThreadCounts, ::testing::Values(1, 2, 8));

TEST(MultiThreadMapData, MapContextCarriesThePassAndTheInputPosition) {
  MultiThreadMapData ds(scalars(10), 3, tagged, MultiThreadMapDataOptions().buffer_size(4));
  ds.begin_pass(4);
  // values 0..9 minus 3 and 8; the position is the input's, dropped ones included
  EXPECT_EQ(
      drain_rows(ds),
      (std::vector<std::vector<int64_t>>{
          {0, 4, 0}, {1, 4, 1}, {2, 4, 2}, {4, 4, 4}, {5, 4, 5}, {6, 4, 6}, {7, 4, 7}, {9, 4, 9}}));
  ds.begin_pass();
  ASSERT_TRUE(ds.next().has_value());
  ds.seek(6);
  EXPECT_EQ(drain_rows(ds), (std::vector<std::vector<int64_t>>{{6, 5, 6}, {7, 5, 7}, {9, 5, 9}}));
}

TEST(MultiThreadMapData, DropsWhatTheFunctionDrops) {
  MultiThreadMapData ds(scalars(12), 4, [](Datapoint dp) -> std::optional<Datapoint> {
    if (value_of(dp) % 2 == 1) return std::nullopt;
    return dp;
  });
  ds.begin_pass();
  EXPECT_EQ(drain(ds), (std::vector<int64_t>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(ds.position(), 6);
  EXPECT_EQ(ds.size(), 12);  // an upper bound, as MapData's
}

TEST(MultiThreadMapData, AWorkersExceptionArrivesAtItsTurnAsItself) {
  MultiThreadMapData ds(
      scalars(30), 4,
      [](Datapoint dp) -> std::optional<Datapoint> {
        const int64_t v = value_of(dp);
        if (v == 7) throw DecodeError("cannot decode images/0007.png: truncated");
        // the datapoints after the bad one finish long before it
        std::this_thread::sleep_for(std::chrono::milliseconds(v < 7 ? 5 : 0));
        return dp;
      },
      MultiThreadMapDataOptions().buffer_size(12));
  for (int pass = 0; pass < 2; ++pass) {
    ds.begin_pass();
    std::vector<int64_t> got;
    std::string message;
    try {
      while (auto dp = ds.next()) got.push_back(value_of(*dp));
    } catch (const DecodeError& e) {
      message = e.what();
    }
    EXPECT_EQ(got, range(0, 7));
    EXPECT_EQ(message, "cannot decode images/0007.png: truncated");
    EXPECT_EQ(ds.position(), 7);
    // the pass cannot go on: the same error again
    EXPECT_EQ(message_of<DecodeError>([&] { ds.next(); }),
              "cannot decode images/0007.png: truncated");
  }
  // seek starts over too, here past the bad datapoint
  ds.seek(8);
  EXPECT_EQ(drain(ds), range(8, 30));
}

TEST(MultiThreadMapData, AnErrorOfTheFlowInsideArrivesAtItsTurn) {
  int64_t i = 0;
  auto gen = std::make_shared<DataFromGenerator>([&i]() -> std::optional<Datapoint> {
    if (i == 5) throw std::out_of_range("the list has 5 files");
    return Datapoint{at::scalar_tensor(i++, at::kLong)};
  });
  MultiThreadMapData ds(gen, 2, [](Datapoint dp) -> std::optional<Datapoint> {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return dp;
  });
  ds.begin_pass();
  std::vector<int64_t> got;
  EXPECT_EQ(message_of<std::out_of_range>([&] {
              while (auto dp = ds.next()) got.push_back(value_of(*dp));
            }),
            "the list has 5 files");
  EXPECT_EQ(got, range(0, 5));
}

TEST(MultiThreadMapData, SeekWithWorkInFlightContinuesExactly) {
  const auto opts = DataFromListOptions().shuffle(true).seed(11);
  // tagged, without drops: seek(n) is exact when nothing before n was dropped
  auto keep_all = [](Datapoint dp, const MapContext& c) -> std::optional<Datapoint> {
    delay_for(value_of(dp));
    return Datapoint{dp[0], at::scalar_tensor(c.pass, at::kLong),
                     at::scalar_tensor(c.position, at::kLong)};
  };
  auto make = [&] {
    return std::make_unique<MultiThreadMapData>(scalars(50, opts), 4, keep_all,
                                                MultiThreadMapDataOptions().buffer_size(10));
  };
  auto whole = make();
  whole->begin_pass(2);
  const auto uninterrupted = drain_rows(*whole);
  ASSERT_EQ(uninterrupted.size(), 50u);

  auto ds = make();
  ds->begin_pass(2);
  for (int k = 0; k < 2; ++k) ASSERT_TRUE(ds->next().has_value());  // work in flight now
  ds->seek(17);
  EXPECT_EQ(ds->position(), 17);
  EXPECT_EQ(drain_rows(*ds),
            std::vector<std::vector<int64_t>>(uninterrupted.begin() + 17, uninterrupted.end()));
  // backwards, to the start of the pass, again with work in flight
  ds->seek(0);
  ASSERT_TRUE(ds->next().has_value());
  ds->seek(0);
  EXPECT_EQ(drain_rows(*ds), uninterrupted);
  // to the end of the pass
  ds->seek(50);
  EXPECT_FALSE(ds->next().has_value());
}

TEST(MultiThreadMapData, BeginPassWithWorkInFlightDeliversOnlyTheNewPass) {
  MultiThreadMapData ds(
      scalars(40), 4,
      [](Datapoint dp, const MapContext& c) -> std::optional<Datapoint> {
        if (c.pass == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        return Datapoint{at::scalar_tensor(c.pass * 1000 + value_of(dp), at::kLong)};
      },
      MultiThreadMapDataOptions().buffer_size(20));
  ds.begin_pass();
  ASSERT_EQ(value_of(*ds.next()), 0);
  ds.begin_pass();  // pass 1, with about 19 inputs of pass 0 in flight
  std::vector<int64_t> expected;
  for (int64_t v : range(0, 40)) expected.push_back(1000 + v);
  EXPECT_EQ(drain(ds), expected);
}

TEST(MultiThreadMapData, DestructionMidPassDoesNotWaitForQueuedWork) {
  // workers waiting for work
  {
    MultiThreadMapData ds(
        scalars(8), 2, [](Datapoint dp) -> std::optional<Datapoint> { return dp; },
        MultiThreadMapDataOptions().buffer_size(2));
    ds.begin_pass();
    ASSERT_TRUE(ds.next().has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // workers busy, much work queued: only the running calls are waited for
  const auto start = std::chrono::steady_clock::now();
  {
    MultiThreadMapData ds(scalars(200), 2, [](Datapoint dp) -> std::optional<Datapoint> {
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
      return dp;
    });
    ds.begin_pass();
    ASSERT_TRUE(ds.next().has_value());
  }
  // the whole pass would take 4 s
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  // a flow that never began holds no threads
  MultiThreadMapData idle(scalars(3), 2,
                          [](Datapoint dp) -> std::optional<Datapoint> { return dp; });
}

TEST(MultiThreadMapData, NonStrictYieldsAPermutationAndCannotSeek) {
  auto list = scalars(50);
  MultiThreadMapData ds(
      list, 8,
      [](Datapoint dp) -> std::optional<Datapoint> {
        delay_for(value_of(dp));
        return dp;
      },
      MultiThreadMapDataOptions().strict(false).buffer_size(16));
  EXPECT_FALSE(ds.seekable());
  EXPECT_EQ(ds.first_unseekable(), &ds);
  EXPECT_EQ(ds.describe(), "MultiThreadMapData(not strict) over DataFromList (50 datapoints)");
  ds.begin_pass();
  std::vector<int64_t> got = drain(ds);
  EXPECT_EQ(ds.position(), 50);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, range(0, 50));
  ds.begin_pass();
  ASSERT_TRUE(ds.next().has_value());
  EXPECT_EQ(message_of<std::logic_error>([&] { ds.seek(3); }),
            "MultiThreadMapData does not support seek");
  EXPECT_EQ(drain(ds).size(), 49u);  // the pass goes on
}

TEST(MultiThreadMapData, SeekableAndDescribedLikeTheFlowInside) {
  auto list = scalars(5);
  auto gen = std::make_shared<DataFromGenerator>([] { return std::optional<Datapoint>(); });
  auto identity = [](Datapoint dp) -> std::optional<Datapoint> { return dp; };
  MultiThreadMapData over_list(list, 4, identity);
  EXPECT_EQ(over_list.name(), "MultiThreadMapData");
  EXPECT_EQ(over_list.describe(), "MultiThreadMapData(strict) over DataFromList (5 datapoints)");
  EXPECT_EQ(over_list.size(), 5);
  EXPECT_TRUE(over_list.seekable());
  MultiThreadMapData over_gen(gen, 1, identity);
  EXPECT_EQ(over_gen.first_unseekable(), gen.get());
  EXPECT_EQ(over_gen.size(), std::nullopt);
}

TEST(MultiThreadMapData, BatchDataOverItEqualsBatchDataOverMapData) {
  const auto opts = DataFromListOptions().shuffle(true).seed(5);
  auto func = [](Datapoint dp, const MapContext& c) -> std::optional<Datapoint> {
    delay_for(value_of(dp));
    return Datapoint{at::add(at::mul(dp[0].to(at::kFloat), 0.5), static_cast<double>(c.pass)),
                     at::full({3}, value_of(dp), at::kLong)};
  };
  BatchData serial(std::make_shared<MapData>(scalars(23, opts), func), 4, true);
  BatchData parallel(std::make_shared<MultiThreadMapData>(scalars(23, opts), 3, func), 4, true);
  for (int pass = 0; pass < 2; ++pass) {
    serial.begin_pass();
    parallel.begin_pass();
    int batches = 0;
    while (auto a = serial.next()) {
      auto b = parallel.next();
      ASSERT_TRUE(b.has_value());
      ASSERT_EQ(a->size(), b->size());
      for (size_t c = 0; c < a->size(); ++c) EXPECT_TRUE(at::equal((*a)[c], (*b)[c]));
      ++batches;
    }
    EXPECT_FALSE(parallel.next().has_value());
    EXPECT_EQ(batches, 6);
  }
  // resume at batch 3 of pass 1
  parallel.begin_pass(1);
  parallel.seek(3);
  serial.begin_pass(1);
  serial.seek(3);
  auto a = serial.next();
  auto b = parallel.next();
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(at::equal((*a)[0], (*b)[0]));
  EXPECT_TRUE(at::equal((*a)[1], (*b)[1]));
}

int64_t intra_op_threads_of_a_new_thread() {
  int n = 0;
  std::thread([&n] { n = at::get_num_threads(); }).join();
  return n;
}

// Restores the intra-op thread count of the test's thread (and the process-wide one) at its end.
class IntraOpThreadsRestore {
 public:
  IntraOpThreadsRestore() : saved_(at::get_num_threads()) {}
  ~IntraOpThreadsRestore() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(MultiThreadMapData, WorkersLeaveTheCallersIntraOpThreadsAsTheyAre) {
  IntraOpThreadsRestore restore;
  at::set_num_threads(3);  // more than the one a worker takes, also on a 1-core machine
  ASSERT_EQ(intra_op_threads_of_a_new_thread(), 3);
  std::mutex mutex;
  std::vector<int> in_workers;
  {
    MultiThreadMapData ds(
        scalars(16), 4,
        [&](Datapoint dp) -> std::optional<Datapoint> {
          // an operation big enough for ATen to run in parallel
          const auto sum = at::ones({1 << 16}).sum();
          std::lock_guard<std::mutex> lock(mutex);
          in_workers.push_back(at::get_num_threads());
          return Datapoint{at::add(dp[0], sum.to(at::kLong))};
        },
        MultiThreadMapDataOptions().buffer_size(4));
    ds.begin_pass();
    EXPECT_EQ(drain(ds).size(), 16u);
  }
  EXPECT_EQ(at::get_num_threads(), 3);
  // ATen gives a new thread the process-wide count: unchanged too
  EXPECT_EQ(intra_op_threads_of_a_new_thread(), 3);
  ASSERT_EQ(in_workers.size(), 16u);
#if AT_PARALLEL_OPENMP
  for (int n : in_workers) EXPECT_EQ(n, 1);
#endif
}

TEST(MultiThreadMapData, RefusesInvalidArguments) {
  auto identity = [](Datapoint dp) -> std::optional<Datapoint> { return dp; };
  EXPECT_EQ(message_of<std::invalid_argument>([&] { MultiThreadMapData(scalars(2), 0, identity); }),
            "MultiThreadMapData: num_threads must be >= 1, got 0");
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              MultiThreadMapData(scalars(2), 4, identity,
                                 MultiThreadMapDataOptions().buffer_size(3));
            }),
            "MultiThreadMapData: buffer_size must be >= num_threads (4), got 3; set "
            "MultiThreadMapDataOptions().buffer_size(n) (default 200)");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { MultiThreadMapData(nullptr, 1, identity); }),
            "MultiThreadMapData: null dataflow");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [&] { MultiThreadMapData(scalars(2), 1, MapData::Func()); }),
            "MultiThreadMapData: empty function");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [&] { MultiThreadMapData(scalars(2), 1, MapData::ContextFunc()); }),
            "MultiThreadMapData: empty function");
  MultiThreadMapData ds(scalars(2), 1, identity);
  EXPECT_THROW(ds.next(), std::logic_error);  // before begin_pass
}

}  // namespace parallel_map_test
}  // namespace trainpack
