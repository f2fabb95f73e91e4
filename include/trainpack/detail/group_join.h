// The ranks' meeting in the rendezvous store, before the group's backend (Gloo, NCCL) connects
// (ProcessGroup::from_environment): every rank announces itself, then waits until all have. A
// rank that fails before it joins (a flag its host refuses, a missing file) posts why, and the
// others fail at once naming it; a rank that never comes (it crashed before joining) is named
// after the join timeout. Without the meeting, the others would wait in the backend's own
// rendezvous for the collective timeout (minutes), naming nobody.
//
// The keys, under the group's prefix: `peer/<rank>` ("<host>\n<pid>"), the counter `joined`,
// `failed_before_join/<rank>` ("<host>\n<message>"), the counters `failures_before_join` and
// `failures_seen`. A store serves one attempt of the job (a fresh store, or torchrun's prefix for
// the attempt), so no key of an earlier attempt is seen.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trainpack::detail {

// A rank's process, as it announced itself.
struct PeerInfo {
  std::string host;
  int64_t pid = 0;
};

// The store operations of the meeting (c10d's TCPStore in ProcessGroup; a map in unit tests).
// Each throws when the store does not answer within its own timeout.
struct JoinStore {
  std::function<void(const std::string& key, const std::string& value)> set;
  std::function<std::string(const std::string& key)> get;
  std::function<bool(const std::string& key)> has;
  // Adds n to the counter `key` and returns its new value (n = 0 reads it).
  std::function<int64_t(const std::string& key, int64_t n)> add;
};

// Announces `rank` (on `host`, process `pid`) and waits, polling every `poll`, until every rank of
// `world_size` has announced itself; returns their announcements by rank. Throws DistributedError
// naming the rank (and its host) when one posted a failure before joining, or listing the ranks
// that had not announced themselves when `timeout` passed (failed_rank: the first of them).
std::vector<PeerInfo> meet_ranks(const JoinStore& store, int64_t rank, int64_t world_size,
                                 const std::string& host, int64_t pid,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds poll = std::chrono::milliseconds(100));

// Posts that `rank` (on `host`) fails before joining, with `message`, for meet_ranks of the
// others.
void post_failure_before_joining(const JoinStore& store, int64_t rank, const std::string& host,
                                 const std::string& message);

// When some rank posted a failure before joining: waits, polling every `poll`, until every rank
// of `world_size` knows (it posted a failure of its own, or meet_ranks read one), at most
// `timeout`. For the rank that serves the store, whose exit would take the store, and the message
// the others have not read yet, with it. Returns at once when no failure was posted.
void wait_until_failure_known(const JoinStore& store, int64_t world_size,
                              std::chrono::milliseconds timeout,
                              std::chrono::milliseconds poll = std::chrono::milliseconds(100));

}  // namespace trainpack::detail
