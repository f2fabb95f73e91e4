// The ranks' meeting before the group forms (meet_ranks) over a store in memory: every rank
// present, a rank that posts a failure before joining, a rank that never comes, and the wait of
// the rank that serves the store.
#include "trainpack/detail/group_join.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainpack/core/distributed.h"

namespace trainpack::detail {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// Keys and counters of a rendezvous store, shared by the ranks' threads.
class MemoryStore {
 public:
  JoinStore view() {
    return {[this](const std::string& key, const std::string& value) {
              std::lock_guard<std::mutex> lock(mutex_);
              values_[key] = value;
            },
            [this](const std::string& key) {
              std::lock_guard<std::mutex> lock(mutex_);
              return values_.at(key);
            },
            [this](const std::string& key) {
              std::lock_guard<std::mutex> lock(mutex_);
              return values_.count(key) > 0;
            },
            [this](const std::string& key, int64_t n) {
              std::lock_guard<std::mutex> lock(mutex_);
              return counters_[key] += n;
            }};
  }
  int64_t counter(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    return counters_[key];
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> values_;
  std::map<std::string, int64_t> counters_;
};

constexpr milliseconds kPoll{5};

std::future<std::vector<PeerInfo>> meet_async(MemoryStore& store, int64_t rank, int64_t world,
                                              milliseconds timeout) {
  return std::async(std::launch::async, [&store, rank, world, timeout] {
    return meet_ranks(store.view(), rank, world, "host" + std::to_string(rank), 100 + rank, timeout,
                      kPoll);
  });
}

TEST(GroupJoin, EveryRankLearnsEveryHostAndProcess) {
  MemoryStore store;
  std::vector<std::future<std::vector<PeerInfo>>> ranks;
  for (int64_t r = 0; r < 3; ++r) {
    ranks.push_back(meet_async(store, r, 3, milliseconds(5000)));
    std::this_thread::sleep_for(milliseconds(20));  // they arrive one after another
  }
  for (auto& f : ranks) {
    const std::vector<PeerInfo> peers = f.get();
    ASSERT_EQ(peers.size(), 3u);
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_EQ(peers[static_cast<size_t>(r)].host, "host" + std::to_string(r));
      EXPECT_EQ(peers[static_cast<size_t>(r)].pid, 100 + r);
    }
  }
}

TEST(GroupJoin, AFailurePostedBeforeJoiningEndsTheWaitNamingTheRankAndHost) {
  MemoryStore store;
  auto rank0 = meet_async(store, 0, 3, milliseconds(60000));
  auto rank1 = meet_async(store, 1, 3, milliseconds(60000));
  std::this_thread::sleep_for(milliseconds(30));
  const auto posted_at = std::chrono::steady_clock::now();
  post_failure_before_joining(store.view(), 2, "host2",
                              "fashion_mnist: error: --batch-size 50 is not a multiple of 4");
  for (auto* f : {&rank0, &rank1}) {
    try {
      f->get();
      ADD_FAILURE() << "meet_ranks returned although rank 2 failed";
    } catch (const DistributedError& e) {
      EXPECT_EQ(e.failed_rank(), 2);
      EXPECT_THAT(e.what(), HasSubstr("cannot join the group: rank 2 (host host2) failed before "
                                      "joining: fashion_mnist: error: --batch-size 50 is not a "
                                      "multiple of 4"));
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - posted_at, milliseconds(5000));
  EXPECT_EQ(store.counter("failures_seen"), 2);
}

TEST(GroupJoin, ARankThatNeverComesIsListedAfterTheJoinTimeout) {
  MemoryStore store;
  auto rank0 = meet_async(store, 0, 4, milliseconds(300));
  auto rank2 = meet_async(store, 2, 4, milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  for (auto* f : {&rank0, &rank2}) {
    try {
      f->get();
      ADD_FAILURE() << "meet_ranks returned without ranks 1 and 3";
    } catch (const DistributedError& e) {
      EXPECT_EQ(e.failed_rank(), 1);
      EXPECT_THAT(e.what(), HasSubstr("ranks 1 and 3 of 4 did not join within 0.3 s "
                                      "(DistributedOptions().join_timeout). They ended or crashed "
                                      "before joining"));
      EXPECT_THAT(e.what(), HasSubstr("then raise the join timeout"));
    }
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
}

TEST(GroupJoin, OneMissingRankIsNamedInTheSingular) {
  MemoryStore store;
  try {
    meet_ranks(store.view(), 0, 2, "host0", 1, milliseconds(50), kPoll);
    ADD_FAILURE() << "meet_ranks returned alone in a group of 2";
  } catch (const DistributedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0 cannot join the group: rank 1 of 2 did not join "
                                    "within 0.05 s"));
    EXPECT_THAT(e.what(), HasSubstr("It ended or crashed before joining (see the output on its "
                                    "host)"));
  }
}

TEST(GroupJoin, TheStoresServerWaitsUntilEveryRankKnowsOfTheFailure) {
  MemoryStore store;
  // No failure posted: nothing to wait for.
  const auto start = std::chrono::steady_clock::now();
  wait_until_failure_known(store.view(), 3, milliseconds(5000), kPoll);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));

  // Rank 0 (the server) posts; rank 1 reads it at once, rank 2 only later.
  post_failure_before_joining(store.view(), 0, "host0", "no data");
  auto server = std::async(std::launch::async, [&store] {
    wait_until_failure_known(store.view(), 3, milliseconds(5000), kPoll);
    return std::chrono::steady_clock::now();
  });
  EXPECT_THROW(meet_ranks(store.view(), 1, 3, "host1", 1, milliseconds(5000), kPoll),
               DistributedError);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(server.wait_for(milliseconds(0)), std::future_status::timeout)
      << "the server left before rank 2 read the failure";
  const auto read_at = std::chrono::steady_clock::now();
  EXPECT_THROW(meet_ranks(store.view(), 2, 3, "host2", 2, milliseconds(5000), kPoll),
               DistributedError);
  EXPECT_GE(server.get(), read_at);

  // A rank that never comes: the wait ends at its timeout.
  MemoryStore alone;
  post_failure_before_joining(alone.view(), 0, "host0", "no data");
  const auto waited_from = std::chrono::steady_clock::now();
  wait_until_failure_known(alone.view(), 2, milliseconds(100), kPoll);
  EXPECT_GE(std::chrono::steady_clock::now() - waited_from, milliseconds(100));
}

}  // namespace
}  // namespace trainpack::detail
