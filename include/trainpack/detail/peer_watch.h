// PeerWatch: heartbeats beside the collectives, so that a rank whose host died, hangs or was cut
// off is noticed within a bound of seconds instead of the collective timeout (minutes), without
// false alarms on a slow step or a slow checkpoint (the heartbeats come from a thread of their
// own, whatever the training thread does).
//
// Every `interval`, a thread adds 1 to this rank's counter in the rendezvous store and reads
// every other rank's. A rank whose counter has not moved for `timeout` (while this rank reached
// the store) is lost; so is the store itself when this rank could not complete a round for
// `timeout` (its host is down or the network to it is cut). The store operations go through a
// connection of their own whose operations time out (the `add` given), never the training
// thread's.
//
// What happens then (a second thread judges, so that a store operation that blocks until its
// timeout delays nothing):
// - the training thread is inside a collective (between enter_collective and leave_collective,
//   where it may wait for the collective timeout): `on_lost_in_collective(message)` is called,
//   which is expected not to return (ProcessGroup logs the message, writes torchrun's error file
//   and ends the process);
// - otherwise, lost() returns the message, and the next collective fails with it at its start.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace trainpack::detail {

class PeerWatch {
 public:
  // add(key, n): adds n to the counter `key` of the store and returns its new value (n = 0 reads
  // it); throws when the store does not answer within its own timeout.
  using StoreAdd = std::function<int64_t(const std::string& key, int64_t n)>;
  using OnLost = std::function<void(const std::string& message)>;

  // `hosts[r]`: the host name of rank r, for messages; `store_address`: "HOST:PORT" of the store.
  PeerWatch(StoreAdd add, int64_t rank, std::vector<std::string> hosts, std::string store_address,
            std::chrono::milliseconds interval, std::chrono::milliseconds timeout,
            OnLost on_lost_in_collective);
  // Stops both threads (waits at most one store operation).
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // The message naming what was lost, or nullopt while every rank beats.
  std::optional<std::string> lost() const;
  // The rank that lost() names, or -1 (none, or the store).
  int64_t lost_rank() const;
  // Around a collective of the training thread. enter_collective throws nothing; the caller
  // checks lost() after it (a loss judged before the collective began is reported there).
  void enter_collective() { in_collective_.fetch_add(1); }
  void leave_collective() { in_collective_.fetch_sub(1); }
  // While held (a collective already failed and its failure is being explained, which waits for
  // the verdict through lost()), a loss does not end the process.
  void hold_exit() { exit_holds_.fetch_add(1); }
  void release_exit() { exit_holds_.fetch_sub(1); }

  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  using Clock = std::chrono::steady_clock;
  void beat_loop();
  void judge_loop();
  // The loss at `now`, or "" (called with mutex_ held); *lost_rank: the rank named, or -1.
  std::string judge(Clock::time_point now, int64_t* lost_rank) const;

  StoreAdd add_;
  int64_t rank_;
  std::vector<std::string> hosts_;
  std::string store_address_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds timeout_;
  OnLost on_lost_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  Clock::time_point started_;
  Clock::time_point last_round_;          // the end of the last round that reached the store
  std::vector<int64_t> counters_;         // by rank, as last read
  std::vector<Clock::time_point> moved_;  // by rank: when its counter last changed
  std::string lost_;
  int64_t lost_rank_ = -1;
  bool acted_ = false;  // on_lost_ was called
  std::atomic<int> in_collective_{0};
  std::atomic<int> exit_holds_{0};
  std::thread beat_;
  std::thread judge_;
};

}  // namespace trainpack::detail
