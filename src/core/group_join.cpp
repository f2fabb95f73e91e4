#include "trainpack/detail/group_join.h"

#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "trainpack/core/distributed.h"

namespace trainpack::detail {

namespace {

std::string peer_key(int64_t rank) { return fmt::format("peer/{}", rank); }
std::string failure_key(int64_t rank) { return fmt::format("failed_before_join/{}", rank); }

// "<first line>\n<rest>" as its two parts.
std::pair<std::string, std::string> split_first_line(const std::string& text) {
  const size_t newline = text.find('\n');
  if (newline == std::string::npos) return {text, std::string()};
  return {text.substr(0, newline), text.substr(newline + 1)};
}

// The failure some rank posted before joining: the DistributedError naming it, or nullopt while
// its key is not there yet (a rank posts in two steps, the counter last, but a store may be read
// between them by a rank that saw an earlier count).
std::optional<DistributedError> posted_failure(const JoinStore& store, int64_t rank,
                                               int64_t world_size) {
  for (int64_t r = 0; r < world_size; ++r) {
    if (r == rank || !store.has(failure_key(r))) continue;
    const auto [host, message] = split_first_line(store.get(failure_key(r)));
    store.add("failures_seen", 1);
    return DistributedError(
        fmt::format("rank {} cannot join the group: rank {} (host {}) failed before joining: {}",
                    rank, r, host, message),
        r);
  }
  return std::nullopt;
}

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += i + 1 == ranks.size() ? " and " : ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

std::vector<PeerInfo> meet_ranks(const JoinStore& store, int64_t rank, int64_t world_size,
                                 const std::string& host, int64_t pid,
                                 std::chrono::milliseconds timeout,
                                 std::chrono::milliseconds poll) {
  store.set(peer_key(rank), fmt::format("{}\n{}", host, pid));
  int64_t joined = store.add("joined", 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (joined < world_size) {
    if (store.add("failures_before_join", 0) > 0) {
      if (std::optional<DistributedError> posted = posted_failure(store, rank, world_size)) {
        throw *posted;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::vector<int64_t> missing;
      for (int64_t r = 0; r < world_size; ++r) {
        if (!store.has(peer_key(r))) missing.push_back(r);
      }
      if (missing.empty()) break;  // the last came in just now
      const bool one = missing.size() == 1;
      throw DistributedError(
          fmt::format("rank {} cannot join the group: {} {} of {} did not join within {} s "
                      "(DistributedOptions().join_timeout). {} ended or crashed before joining "
                      "(see the output on {} host), or {} work before joining takes longer than "
                      "that (then raise the join timeout)",
                      rank, one ? "rank" : "ranks", rank_list(missing), world_size,
                      static_cast<double>(timeout.count()) / 1000.0, one ? "It" : "They",
                      one ? "its" : "their", one ? "its" : "their"),
          missing.front());
    }
    std::this_thread::sleep_for(poll);
    joined = store.add("joined", 0);
  }
  std::vector<PeerInfo> peers(static_cast<size_t>(world_size));
  for (int64_t r = 0; r < world_size; ++r) {
    const auto [peer_host, pid_text] = split_first_line(store.get(peer_key(r)));
    PeerInfo& peer = peers[static_cast<size_t>(r)];
    peer.host = peer_host;
    std::istringstream(pid_text) >> peer.pid;
  }
  return peers;
}

void post_failure_before_joining(const JoinStore& store, int64_t rank, const std::string& host,
                                 const std::string& message) {
  // The key first: a rank that sees the counter move finds it.
  store.set(failure_key(rank), fmt::format("{}\n{}", host, message));
  store.add("failures_before_join", 1);
}

void wait_until_failure_known(const JoinStore& store, int64_t world_size,
                              std::chrono::milliseconds timeout, std::chrono::milliseconds poll) {
  if (store.add("failures_before_join", 0) == 0) return;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (store.add("failures_before_join", 0) + store.add("failures_seen", 0) < world_size &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace trainpack::detail
