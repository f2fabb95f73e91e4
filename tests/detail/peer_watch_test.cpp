// PeerWatch (the heartbeats beside the collectives) over a store in memory: when a silent peer or
// an unreachable store is judged lost, what the message names, and that slowness is not a loss.
#include "trainpack/detail/peer_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace trainpack::detail {
namespace {

using std::chrono::milliseconds;

// The counters of a rendezvous store, with a switch that makes it unreachable and a delay per
// operation.
class FakeStore {
 public:
  int64_t add(const std::string& key, int64_t n) {
    if (delay_ms_ > 0) std::this_thread::sleep_for(milliseconds(delay_ms_.load()));
    if (down_) throw std::runtime_error("Socket Timeout");
    std::lock_guard<std::mutex> lock(mutex_);
    return counters_[key] += n;
  }
  PeerWatch::StoreAdd adder() {
    return [this](const std::string& key, int64_t n) { return add(key, n); };
  }
  void set_down(bool down) { down_ = down; }
  void set_delay(milliseconds delay) { delay_ms_ = delay.count(); }

 private:
  std::mutex mutex_;
  std::map<std::string, int64_t> counters_;
  std::atomic<bool> down_{false};
  std::atomic<int64_t> delay_ms_{0};
};

// Another rank that beats every `interval` until stopped.
class FakePeer {
 public:
  FakePeer(FakeStore& store, int rank, milliseconds interval)
      : thread_([this, &store, rank, interval] {
          while (!stop_) {
            try {
              store.add("beat/" + std::to_string(rank), 1);
            } catch (const std::exception&) {
            }
            std::this_thread::sleep_for(interval);
          }
        }) {}
  ~FakePeer() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

constexpr milliseconds kInterval{20};
constexpr milliseconds kTimeout{300};

// Polls watch.lost() for up to `limit`.
std::optional<std::string> wait_lost(const PeerWatch& watch, milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (auto lost = watch.lost()) return lost;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return watch.lost();
}

TEST(PeerWatch, EveryRankBeatingIsNoLoss) {
  FakeStore store;
  FakePeer peer(store, 1, kInterval);
  PeerWatch watch(store.adder(), 0, {"host0", "host1"}, "host0:29500", kInterval, kTimeout,
                  [](const std::string&) { FAIL() << "nothing was lost"; });
  std::this_thread::sleep_for(kTimeout * 3);
  EXPECT_FALSE(watch.lost().has_value());
  EXPECT_EQ(watch.lost_rank(), -1);
}

TEST(PeerWatch, SilentPeerIsLostAfterTheTimeoutNamedWithItsHost) {
  FakeStore store;
  FakePeer peer(store, 1, kInterval);
  PeerWatch watch(store.adder(), 0, {"host0", "host1"}, "host0:29500", kInterval, kTimeout,
                  [](const std::string&) {});
  std::this_thread::sleep_for(kTimeout);
  ASSERT_FALSE(watch.lost().has_value());
  const auto silent_from = std::chrono::steady_clock::now();
  peer.stop();
  const std::optional<std::string> lost = wait_lost(watch, kTimeout * 4);
  const auto after = std::chrono::steady_clock::now() - silent_from;
  ASSERT_TRUE(lost.has_value());
  // Not long before the timeout (the last beat seen may precede the stop by a round), and not
  // long after it (a loaded machine delays the threads).
  EXPECT_GE(after, kTimeout / 2);
  EXPECT_LT(after, kTimeout * 3);
  EXPECT_EQ(watch.lost_rank(), 1);
  EXPECT_NE(lost->find("rank 1 on host host1 sent no heartbeat for"), std::string::npos) << *lost;
  EXPECT_NE(lost->find("the heartbeat timeout is 0.3 s"), std::string::npos) << *lost;
}

TEST(PeerWatch, UnreachableStoreIsLostNamingTheStore) {
  FakeStore store;
  FakePeer peer(store, 0, kInterval);
  PeerWatch watch(store.adder(), 1, {"host0", "host1"}, "host0:29500", kInterval, kTimeout,
                  [](const std::string&) {});
  std::this_thread::sleep_for(kTimeout);
  store.set_down(true);
  const std::optional<std::string> lost = wait_lost(watch, kTimeout * 4);
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(watch.lost_rank(), -1);
  EXPECT_NE(lost->find("rank 1 lost contact with the rendezvous store at host0:29500"),
            std::string::npos)
      << *lost;
  // The peers are not blamed for what the store did.
  EXPECT_EQ(lost->find("sent no heartbeat"), std::string::npos) << *lost;
}

TEST(PeerWatch, PeerSilentBeforeTheStoreWentIsStillTheOneNamed) {
  // Rank 1 goes silent; a little later the store goes too (rank 0, which serves it, ended for
  // that reason): rank 2 names rank 1, not the store.
  FakeStore store;
  FakePeer peer0(store, 0, kInterval);
  auto peer1 = std::make_unique<FakePeer>(store, 1, kInterval);
  PeerWatch watch(store.adder(), 2, {"host0", "host1", "host2"}, "host0:29500", kInterval, kTimeout,
                  [](const std::string&) {});
  std::this_thread::sleep_for(kTimeout);
  peer1->stop();
  std::this_thread::sleep_for(kTimeout / 2);
  store.set_down(true);
  const std::optional<std::string> lost = wait_lost(watch, kTimeout * 4);
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(watch.lost_rank(), 1) << *lost;
  EXPECT_NE(lost->find("rank 1 on host host1 sent no heartbeat"), std::string::npos) << *lost;
}

TEST(PeerWatch, SlowStoreOperationsUnderTheTimeoutAreNoLoss) {
  FakeStore store;
  FakePeer peer(store, 1, kInterval);
  store.set_delay(milliseconds(60));  // a round takes 120 ms, under the 300 ms timeout
  PeerWatch watch(store.adder(), 0, {"host0", "host1"}, "host0:29500", kInterval, kTimeout,
                  [](const std::string&) {});
  std::this_thread::sleep_for(kTimeout * 4);
  EXPECT_FALSE(watch.lost().has_value()) << *watch.lost();
}

TEST(PeerWatch, LossDuringACollectiveCallsOnLostOnce) {
  FakeStore store;
  auto peer = std::make_unique<FakePeer>(store, 1, kInterval);
  std::atomic<int> calls{0};
  std::string message;
  std::mutex mutex;
  PeerWatch watch(store.adder(), 0, {"host0", "host1"}, "host0:29500", kInterval, kTimeout,
                  [&](const std::string& m) {
                    std::lock_guard<std::mutex> lock(mutex);
                    message = m;
                    ++calls;
                  });
  watch.enter_collective();
  std::this_thread::sleep_for(kTimeout);
  EXPECT_EQ(calls.load(), 0);
  peer->stop();
  std::this_thread::sleep_for(kTimeout * 4);
  watch.leave_collective();
  EXPECT_EQ(calls.load(), 1);
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_NE(message.find("rank 1 on host host1"), std::string::npos) << message;
}

TEST(PeerWatch, LossOutsideACollectiveOrWhileHeldOnlyReportsIt) {
  FakeStore store;
  auto peer = std::make_unique<FakePeer>(store, 1, kInterval);
  std::atomic<int> calls{0};
  PeerWatch watch(store.adder(), 0, {"host0", "host1"}, "host0:29500", kInterval, kTimeout,
                  [&](const std::string&) { ++calls; });
  peer->stop();
  ASSERT_TRUE(wait_lost(watch, kTimeout * 4).has_value());
  std::this_thread::sleep_for(kInterval * 3);
  EXPECT_EQ(calls.load(), 0);  // not in a collective: the next one reports it
  watch.hold_exit();           // a failed collective explaining itself
  watch.enter_collective();
  std::this_thread::sleep_for(kInterval * 5);
  EXPECT_EQ(calls.load(), 0);
  watch.release_exit();
  std::this_thread::sleep_for(kInterval * 5);
  EXPECT_EQ(calls.load(), 1);
  watch.leave_collective();
}

}  // namespace
}  // namespace trainpack::detail
