#include "trainpack/detail/peer_watch.h"

#include <exception>
#include <utility>

#include <fmt/format.h>

namespace trainpack::detail {

namespace {

double seconds_between(std::chrono::steady_clock::time_point from,
                       std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

PeerWatch::PeerWatch(StoreAdd add, int64_t rank, std::vector<std::string> hosts,
                     std::string store_address, std::chrono::milliseconds interval,
                     std::chrono::milliseconds timeout, OnLost on_lost_in_collective)
    : add_(std::move(add)),
      rank_(rank),
      hosts_(std::move(hosts)),
      store_address_(std::move(store_address)),
      interval_(interval),
      timeout_(timeout),
      on_lost_(std::move(on_lost_in_collective)) {
  started_ = Clock::now();
  last_round_ = started_;
  counters_.assign(hosts_.size(), -1);
  moved_.assign(hosts_.size(), started_);
  beat_ = std::thread([this] { beat_loop(); });
  judge_ = std::thread([this] { judge_loop(); });
}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  judge_.join();
  beat_.join();
}

int64_t PeerWatch::lost_rank() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_rank_;
}

std::optional<std::string> PeerWatch::lost() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (lost_.empty()) return std::nullopt;
  return lost_;
}

// One round: this rank's beat, then every other rank's counter. A store that does not answer
// throws out of add_ after its own timeout; the round then counts as not done.
void PeerWatch::beat_loop() {
  const std::string own = fmt::format("beat/{}", rank_);
  std::vector<int64_t> read(hosts_.size(), -1);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (stopping_) return;
    }
    bool done = true;
    try {
      add_(own, 1);
      for (size_t r = 0; r < read.size(); ++r) {
        if (static_cast<int64_t>(r) != rank_) read[r] = add_(fmt::format("beat/{}", r), 0);
      }
    } catch (const std::exception&) {
      done = false;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    const Clock::time_point now = Clock::now();
    if (done) {
      last_round_ = now;
      for (size_t r = 0; r < read.size(); ++r) {
        if (read[r] != counters_[r]) {
          counters_[r] = read[r];
          moved_[r] = now;
        }
      }
    }
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
    if (stopping_) return;
  }
}

std::string PeerWatch::judge(Clock::time_point now, int64_t* lost_rank) const {
  *lost_rank = -1;
  // A peer is judged on the rounds that reached the store: its silence is then its own. One
  // that was already silent while the store answered stays judged when the store then goes too
  // (rank 0, which serves it, may have just ended for that very peer).
  for (size_t r = 0; r < moved_.size(); ++r) {
    if (static_cast<int64_t>(r) == rank_) continue;
    const Clock::time_point since = moved_[r];
    const bool silent_while_store_answered = last_round_ - since > 2 * interval_;
    const Clock::time_point judged_until = silent_while_store_answered ? now : last_round_;
    if (judged_until - since > timeout_) {
      *lost_rank = static_cast<int64_t>(r);
      return fmt::format(
          "rank {} on host {} sent no heartbeat for {:.1f} s (the heartbeat timeout is {:.1f} "
          "s): its host is down, its process is stopped or gone, or the network between {} and "
          "the store at {} is cut",
          r, hosts_[r], seconds_between(since, judged_until), timeout_.count() / 1000.0, hosts_[r],
          store_address_);
    }
  }
  if (now - last_round_ > timeout_) {
    return fmt::format(
        "rank {} lost contact with the rendezvous store at {}: no answer for {:.1f} s (the "
        "heartbeat timeout is {:.1f} s). The host that serves it (rank 0's, or torchrun's agent's "
        "with the c10d rendezvous) is down, or the network between it and {} is cut",
        rank_, store_address_, seconds_between(last_round_, now), timeout_.count() / 1000.0,
        hosts_[static_cast<size_t>(rank_)]);
  }
  return {};
}

void PeerWatch::judge_loop() {
  // Judges twice per interval: a loss is acted on at most interval / 2 after `timeout`.
  const auto period = std::max(interval_ / 2, std::chrono::milliseconds(10));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, period, [this] { return stopping_; });
    if (stopping_) return;
    if (lost_.empty()) lost_ = judge(Clock::now(), &lost_rank_);
    if (!lost_.empty() && !acted_ && in_collective_.load() > 0 && exit_holds_.load() == 0) {
      acted_ = true;
      const std::string message = lost_;
      lock.unlock();
      on_lost_(message);  // ends the process
      lock.lock();
    }
  }
}

}  // namespace trainpack::detail
