// The ranks' stop vote of a data-parallel Trainer: at every step boundary one all-reduce of every
// rank's wish gives all the same answer, so that all stop at the same boundary (a stop signal,
// request_stop() or a held StopTraining on any rank). docs/distributed.md describes it; internal.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainpack/core/distributed.h"
#include "trainpack/core/exceptions.h"

namespace trainpack {
namespace detail {

class StopVote {
 public:
  StopVote() = default;
  // A vote among `world_size` ranks.
  explicit StopVote(int64_t world_size);

  // Keeps `e`, a StopTraining thrown outside the step on this rank (`rank`), until the next vote,
  // and logs so; dropped while another is held.
  void hold(const StopTraining& e, int64_t rank);
  // The StopTraining held, if any.
  const std::optional<StopTraining>& held() const { return held_; }

  // What the ranks decided at a boundary.
  struct Outcome {
    // Set when every rank stops now: the StopTraining to throw.
    std::optional<StopTraining> stop;
    // The stop signal that stops them, this rank's or another's (0: none).
    int signal = 0;
    // Some rank called request_stop(), and no rank stops now otherwise.
    bool requested = false;
  };
  // One all-reduce over `group` of every rank's wish: this rank's `local_signal` (its pending stop
  // signal, or 0), its held StopTraining, `stop_requested`. In this order: a held StopTraining on
  // any rank stops every rank (this rank's own, else "rank <r> stopped training (its log says
  // why)"); after an epoch's last step (`epoch_end`) nothing else does; then a signal (this rank's:
  // "SIGINT (Ctrl-C)", "SIGTERM", ...; else "rank <r> received <name>"); then a request, logged
  // when this rank had not requested it. A collective: every rank calls it at the same boundary.
  Outcome vote(ProcessGroup& group, int local_signal, bool stop_requested, bool epoch_end);

 private:
  std::optional<StopTraining> held_;
  std::vector<at::Tensor> buffer_;  // one int64 per rank
};

}  // namespace detail
}  // namespace trainpack
