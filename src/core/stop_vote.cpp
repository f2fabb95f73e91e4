#include "trainpack/detail/stop_vote.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <csignal>
#include <string>

#include "trainpack/detail/signals.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace detail {

// Codes of the vote: what each rank wants at a boundary. Signals are kVoteSignal + number.
namespace {
constexpr int64_t kVoteGoOn = 0;
constexpr int64_t kVoteRequest = 1;  // request_stop()
constexpr int64_t kVoteHeld = 2;     // a callback's StopTraining, held
constexpr int64_t kVoteSignal = 100;
}  // namespace

StopVote::StopVote(int64_t world_size) : buffer_{at::zeros({world_size}, at::kLong)} {}

void StopVote::hold(const StopTraining& e, int64_t rank) {
  if (held_) return;
  held_ = e;
  TP_LOG_INFO("Rank {}: {}; every rank stops at the next step boundary.", rank,
              e.what()[0] ? e.what() : "StopTraining");
}

StopVote::Outcome StopVote::vote(ProcessGroup& group, int local_signal, bool stop_requested,
                                 bool epoch_end) {
  const int64_t mine = local_signal != 0 ? kVoteSignal + local_signal
                       : held_           ? kVoteHeld
                       : stop_requested  ? kVoteRequest
                                         : kVoteGoOn;
  at::Tensor& votes = buffer_.front();
  votes.zero_();
  votes.data_ptr<int64_t>()[group.rank()] = mine;
  group.all_reduce_sum(buffer_);
  const int64_t* v = votes.data_ptr<int64_t>();
  const int64_t n = group.world_size();
  Outcome out;
  // After an epoch's last step only held StopTrainings stop (as a StopTraining in trigger_step of
  // the last step skips the epoch's end in one process); signals and requests stop at the next
  // epoch's start, as in one process.
  if (held_) {
    out.stop = *held_;
    return out;
  }
  for (int64_t r = 0; r < n; ++r) {
    if (v[r] == kVoteHeld) {
      out.stop = StopTraining(fmt::format("rank {} stopped training (its log says why)", r));
      return out;
    }
  }
  if (epoch_end) return out;
  if (local_signal != 0) {
    out.signal = local_signal;
    out.stop = StopTraining(local_signal == SIGINT ? std::string("SIGINT (Ctrl-C)")
                                                   : signal_name(local_signal));
    return out;
  }
  for (int64_t r = 0; r < n; ++r) {
    if (v[r] >= kVoteSignal) {
      // Stopped by a signal that another rank received: it is this rank's stop by a signal too
      // (the chief saves a checkpoint of the stop step, the program exits as signalled).
      out.signal = static_cast<int>(v[r] - kVoteSignal);
      out.stop = StopTraining(fmt::format("rank {} received {}", r, signal_name(out.signal)));
      return out;
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    if (v[r] == kVoteRequest) {
      if (!stop_requested) TP_LOG_INFO("Rank {} requested a stop; every rank stops now.", r);
      out.requested = true;
      return out;
    }
  }
  return out;
}

}  // namespace detail
}  // namespace trainpack
