// ProcessGroup: c10d's store and process group behind trainpack's small interface
// (core/distributed.h). c10d stays out of the public headers (its Gloo backend needs Gloo's
// headers, which LibTorch does not ship: without them, TRAINPACK_WITH_GLOO is not defined and the
// "gloo" backend says how to get it when asked for).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#ifdef TRAINPACK_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "trainpack/core/distributed.h"
#include "trainpack/detail/group_join.h"
#include "trainpack/detail/peer_watch.h"
#include "trainpack/detail/torch_compat.h"
#include "trainpack/utils/error_file.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace detail {

struct ProcessGroupImpl {
  DistributedEnv env;
  std::chrono::milliseconds timeout{0};
  std::string backend = "none";
  c10::intrusive_ptr<c10d::Store> store;  // trainpack's keys, under the prefix "trainpack/"
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  std::vector<PeerInfo> peers;       // by rank
  std::unique_ptr<PeerWatch> watch;  // null without heartbeats (a group of one, or turned off)
};

}  // namespace detail

namespace {

using detail::ProcessGroupImpl;

std::string this_host() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string from_bytes(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// Whether process `pid` on this machine has ended (gone, or a zombie that its parent did not
// reap yet, as torchrun's children are until it notices).
bool process_ended(int64_t pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

// A client of the store at MASTER_ADDR:MASTER_PORT whose operations give up after `timeout`;
// under torchrun's agent store, under the attempt's prefix.
c10::intrusive_ptr<c10d::Store> connect_to_store(const DistributedEnv& env,
                                                 std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  compat::use_classic_tcp_store(opts);
  opts.port = static_cast<std::uint16_t>(env.master_port);
  opts.timeout = timeout;
  opts.isServer = false;
  opts.waitWorkers = false;
  c10::intrusive_ptr<c10d::Store> store =
      c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  if (!env.agent_store) return store;
  return c10::make_intrusive<c10d::PrefixStore>(
      fmt::format("/worker/attempt_{}", env.restart_count), store);
}

c10::intrusive_ptr<c10d::Store> make_store(const DistributedEnv& env,
                                           std::chrono::milliseconds timeout) {
  // torchrun's agent serves the store; every worker is a client under the attempt's prefix.
  if (env.agent_store) return connect_to_store(env, timeout);
  c10d::TCPStoreOptions opts;
  compat::use_classic_tcp_store(opts);
  opts.port = static_cast<std::uint16_t>(env.master_port);
  opts.timeout = timeout;
  opts.isServer = env.rank == 0;
  opts.numWorkers = static_cast<std::size_t>(env.world_size);
  opts.waitWorkers = false;  // the ranks meet in the store instead (detail/group_join.h)
  opts.multiTenant = true;
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
}

// The meeting's view of trainpack's keys in the store (`store`: under the prefix "trainpack/").
detail::JoinStore join_store(const c10::intrusive_ptr<c10d::Store>& store) {
  return {[store](const std::string& key, const std::string& value) {
            store->set(key, to_bytes(value));
          },
          [store](const std::string& key) { return from_bytes(store->get(key)); },
          [store](const std::string& key) { return store->check({key}); },
          [store](const std::string& key, int64_t n) { return store->add(key, n); }};
}

// A connection of its own to the rendezvous store, for the heartbeats (rank 0 serves the store,
// or torchrun's agent does), the keys under the same prefix as the group's ("trainpack/").
c10::intrusive_ptr<c10d::Store> make_heartbeat_store(const DistributedEnv& env,
                                                     std::chrono::milliseconds timeout) {
  return c10::make_intrusive<c10d::PrefixStore>("trainpack", connect_to_store(env, timeout));
}

// Ends this process for a peer lost while it waits in a collective (PeerWatch): the message in
// the log and in torchrun's error file, then exit status 1 without unwinding (the collective
// would wait until its timeout).
[[noreturn]] void exit_for_lost_peer(const std::string& error_file, int64_t rank,
                                     const std::string& message) {
  TP_LOG_ERROR(
      "{}; ending this process (exit status 1) instead of waiting for the collective's "
      "timeout",
      message);
  if (!error_file.empty()) {
    try {
      write_torchrun_error_file(error_file, fmt::format("rank {}: {}", rank, message));
    } catch (...) {  // the message is in the log
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);
}

#ifdef TRAINPACK_WITH_GLOO
std::shared_ptr<::gloo::transport::Device> gloo_device(const DistributedEnv& env) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  // A group on one machine talks over loopback: never bind to another interface.
  if (is_loopback(env.master_addr)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

// `for_group` false (a group of one, which uses no backend): only the name is checked.
std::string choose_backend(const DistributedOptions& options, bool for_group) {
  std::string backend = options.backend();
#ifdef USE_C10D_NCCL
  const bool has_nccl = true;
#else
  const bool has_nccl = false;
#endif
  if (backend.empty()) backend = options.cuda() && has_nccl ? "nccl" : "gloo";
  if (backend == "nccl" && !has_nccl) {
    throw std::invalid_argument(
        "DistributedOptions().backend(\"nccl\"): this LibTorch was built without NCCL (Debian's "
        "is CPU-only); use \"gloo\", or build against a CUDA LibTorch (-DTorch_DIR=...)");
  }
  if (for_group && backend == "nccl" && !torch::cuda::is_available()) {
    throw std::invalid_argument(
        "DistributedOptions: the NCCL backend needs a CUDA GPU, and none is available on this "
        "machine; train on the CPU with \"gloo\" (DistributedOptions().backend(\"gloo\"))");
  }
  if (backend != "gloo" && backend != "nccl") {
    throw std::invalid_argument(fmt::format(
        "DistributedOptions().backend(\"{}\"): unknown backend; use \"gloo\" (CPU), \"nccl\" "
        "(CUDA) or \"\" for the default",
        backend));
  }
#ifndef TRAINPACK_WITH_GLOO
  if (for_group && backend == "gloo") {
    throw std::invalid_argument(
        "DistributedOptions: the Gloo backend (data-parallel training on the CPU) is not in this "
        "build of trainpack: Gloo's headers (gloo/allreduce.h) were not found when it was "
        "configured. Install them (Debian/Ubuntu: apt-get install libgloo-dev) and configure and "
        "build trainpack again, or train on CUDA GPUs with \"nccl\"");
  }
#endif
  return backend;
}

// explain_failure's search: a rank that reported a failure, or one on this host whose process
// ended; nullopt when none (yet). Sets *others_elsewhere when some ranks run on other hosts, and
// *store_ok to false when the store failed (it is not asked again: a store whose host hangs
// answers only after the timeout).
std::optional<DistributedError> find_failed_rank(const ProcessGroupImpl& impl,
                                                 const std::string& head, const std::string& error,
                                                 bool* others_elsewhere, bool* store_ok,
                                                 std::string* secondary) {
  const int64_t rank = impl.env.rank;
  // 1. A rank that reported its own failure.
  try {
    if (impl.store && *store_ok) {
      for (int64_t r = 0; r < impl.env.world_size; ++r) {
        const std::string key = fmt::format("failed/{}", r);
        if (r != rank && impl.store->check({key})) {
          return DistributedError(
              fmt::format("{} because rank {} failed: {} (the collective said: {})", head, r,
                          from_bytes(impl.store->get(key)), error),
              r);
        }
      }
    }
  } catch (...) {  // the store is unreachable: its host (rank 0 or torchrun) may be gone
    *store_ok = false;
  }
  // 2. A rank on this machine whose process has ended.
  const std::string host = this_host();
  for (int64_t r = 0; r < static_cast<int64_t>(impl.peers.size()); ++r) {
    const detail::PeerInfo& peer = impl.peers[static_cast<size_t>(r)];
    if (r == rank) continue;
    if (peer.host != host) {
      *others_elsewhere = true;
      continue;
    }
    if (process_ended(peer.pid)) {
      // A rank that ended because a collective of its own failed (it recorded why) did not cause
      // the failure: look further, and keep its reason in case nothing else is found.
      try {
        const std::string key = fmt::format("follows/{}", r);
        if (impl.store && *store_ok && impl.store->check({key})) {
          *secondary = fmt::format("rank {} ended after a collective of its own failed: {}", r,
                                   from_bytes(impl.store->get(key)));
          continue;
        }
      } catch (...) {
        *store_ok = false;
      }
      return DistributedError(
          fmt::format("{} because rank {} (process {}) has died without a word (killed, or it "
                      "crashed); the collective said: {}",
                      head, r, peer.pid, error),
          r);
    }
  }
  return std::nullopt;
}

}  // namespace

namespace {

void start_heartbeats(ProcessGroupImpl& impl, const DistributedOptions& options) {
  const DistributedEnv& env = impl.env;
  // A store operation waits at most one interval (at least a second): a round that cannot finish
  // is over long before the heartbeat timeout.
  const auto op_timeout = std::max(options.heartbeat_interval(), std::chrono::milliseconds(1000));
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = make_heartbeat_store(env, op_timeout);
  } catch (const std::exception& e) {
    throw DistributedError(fmt::format("rank {} could not open its heartbeat connection to the "
                                       "rendezvous store at {}:{}: {}",
                                       env.rank, env.master_addr, env.master_port, e.what()),
                           -1);
  }
  std::vector<std::string> hosts;
  for (const detail::PeerInfo& peer : impl.peers) hosts.push_back(peer.host);
  const std::string error_file = env.error_file;
  const int64_t rank = env.rank;
  impl.watch = std::make_unique<detail::PeerWatch>(
      [store](const std::string& key, int64_t n) { return store->add(key, n); }, env.rank,
      std::move(hosts), fmt::format("{}:{}", env.master_addr, env.master_port),
      options.heartbeat_interval(), options.heartbeat_timeout(),
      [error_file, rank](const std::string& message) {
        exit_for_lost_peer(error_file, rank, message);
      });
}

}  // namespace

// ---- construction ----

ProcessGroup::ProcessGroup(std::unique_ptr<detail::ProcessGroupImpl> impl)
    : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::single() {
  auto impl = std::make_unique<ProcessGroupImpl>();
  impl->peers.push_back({this_host(), static_cast<int64_t>(::getpid())});
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

std::shared_ptr<ProcessGroup> ProcessGroup::from_environment(DistributedOptions options) {
  if (options.timeout().count() <= 0) {
    throw std::invalid_argument(fmt::format(
        "DistributedOptions().timeout: must be > 0 (the longest a collective waits for the other "
        "ranks, e.g. std::chrono::minutes(10)), got {} ms",
        options.timeout().count()));
  }
  if (options.join_timeout().count() <= 0) {
    throw std::invalid_argument(fmt::format(
        "DistributedOptions().join_timeout: must be > 0 (the longest a rank waits for the others "
        "to join, e.g. std::chrono::minutes(2)), got {} ms",
        options.join_timeout().count()));
  }
  if (options.heartbeat_interval().count() < 0 || options.heartbeat_timeout().count() < 0 ||
      (options.heartbeat_interval().count() > 0 && options.heartbeat_timeout().count() > 0 &&
       options.heartbeat_timeout() < 2 * options.heartbeat_interval())) {
    throw std::invalid_argument(fmt::format(
        "DistributedOptions: heartbeat_timeout ({} ms) must be at least twice heartbeat_interval "
        "({} ms), or a rank that beats on time would count as lost; give e.g. 20 s and 2 s, or 0 "
        "to turn the heartbeats off",
        options.heartbeat_timeout().count(), options.heartbeat_interval().count()));
  }
  const DistributedEnv env = options.env() ? *options.env() : DistributedEnv::from_environment();
  // The backend's name is checked for a group of one too: the program that runs alone today runs
  // in a group tomorrow.
  const std::string backend = choose_backend(options, env.distributed());
  if (!env.distributed()) return single();

  auto impl = std::make_unique<ProcessGroupImpl>();
  impl->env = env;
  impl->timeout = options.timeout();
  impl->backend = backend;
  if (env.rank != 0) {
    // The chief's log tells the story; the others add their warnings and errors, named. Set
    // before joining, so that not even the rendezvous lines of other ranks reach their logs.
    logger::set_message_prefix(fmt::format("rank {}: ", env.rank));
    if (logger::level() < logger::Level::kWarning) logger::set_level(logger::Level::kWarning);
  }
  TP_LOG_INFO("Joining the process group: rank {} of {} (local rank {}), {} at {}:{}{}, via {} ...",
              env.rank, env.world_size, env.local_rank, impl->backend, env.master_addr,
              env.master_port, env.agent_store ? " (torchrun's store)" : "", env.launcher);
  // Reaching the store and meeting the other ranks in it wait at most the join timeout; the
  // store's operations after that, the collective timeout.
  c10::intrusive_ptr<c10d::Store> base;
  try {
    base = make_store(env, options.join_timeout());
  } catch (const std::exception& e) {
    throw DistributedError(
        fmt::format("rank {} could not reach the rendezvous store at {}:{} within {} s "
                    "(DistributedOptions().join_timeout): {}. Check MASTER_ADDR and MASTER_PORT, "
                    "and that rank 0 started (and see its output: it may have failed before "
                    "joining)",
                    env.rank, env.master_addr, env.master_port,
                    static_cast<double>(options.join_timeout().count()) / 1000.0, e.what()),
        -1);
  }
  impl->store = c10::make_intrusive<c10d::PrefixStore>("trainpack", base);
  // Who is who (for naming a rank that dies): every rank announces itself and waits for the
  // others, so that one that fails before joining is named at once, not after the backend's
  // rendezvous times out.
  const detail::JoinStore meeting = join_store(impl->store);
  const bool serves_store = env.rank == 0 && !env.agent_store;
  try {
    impl->peers = detail::meet_ranks(meeting, env.rank, env.world_size, this_host(),
                                     static_cast<int64_t>(::getpid()), options.join_timeout());
  } catch (const DistributedError&) {
    // Another rank failed before joining: the store (and its message) ends with this process.
    if (serves_store) {
      try {
        detail::wait_until_failure_known(meeting, env.world_size, options.join_timeout());
      } catch (...) {  // the rank's own error says what matters
      }
    }
    throw;
  } catch (const std::exception& e) {
    throw DistributedError(fmt::format("rank {} lost the rendezvous store at {}:{} while meeting "
                                       "the other ranks: {}",
                                       env.rank, env.master_addr, env.master_port, e.what()),
                           -1);
  }
  base->setTimeout(options.timeout());
  auto group_store = c10::make_intrusive<c10d::PrefixStore>("group", base);
  try {
    [[maybe_unused]] const int rank = static_cast<int>(env.rank);
    [[maybe_unused]] const int size = static_cast<int>(env.world_size);
    if (impl->backend == "gloo") {
#ifdef TRAINPACK_WITH_GLOO
      auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout());
      gloo_options->devices.push_back(gloo_device(env));
      impl->group = compat::wrap_backend<c10d::ProcessGroup>(
          c10::make_intrusive<c10d::ProcessGroupGloo>(group_store, rank, size, gloo_options), rank,
          size, /*gloo=*/true);
#endif
    } else {
#ifdef USE_C10D_NCCL
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = options.timeout();
      impl->group = compat::wrap_backend<c10d::ProcessGroup>(
          c10::make_intrusive<c10d::ProcessGroupNCCL>(group_store, rank, size, nccl_options), rank,
          size, /*gloo=*/false);
#endif
    }
  } catch (const std::exception& e) {
    throw DistributedError(fmt::format("rank {} could not connect to the other ranks ({}): {}",
                                       env.rank, impl->backend, e.what()),
                           -1);
  }
  if (options.heartbeat_interval().count() > 0 && options.heartbeat_timeout().count() > 0) {
    start_heartbeats(*impl, options);
  }
  auto group = std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
  group->barrier();
  TP_LOG_INFO("Rank {} of {} joined the process group.", group->rank(), group->world_size());
  return group;
}

// ---- accessors ----

int64_t ProcessGroup::rank() const { return impl_->env.rank; }
int64_t ProcessGroup::world_size() const { return impl_->env.world_size; }
int64_t ProcessGroup::local_rank() const { return impl_->env.local_rank; }
const DistributedEnv& ProcessGroup::env() const { return impl_->env; }
std::string ProcessGroup::backend() const { return impl_->backend; }
std::chrono::milliseconds ProcessGroup::timeout() const { return impl_->timeout; }
void* ProcessGroup::c10d_process_group() const {
  return impl_->group ? static_cast<void*>(&impl_->group) : nullptr;
}

// ---- collectives ----

namespace {

// NCCL reduces CUDA tensors only: a CPU tensor (the trainer's stop vote, counters, bytes) goes
// through a copy on this rank's device. Gloo takes them as they are.
template <typename Fn>
void on_backend_device(const ProcessGroupImpl& impl, at::Tensor& t, Fn&& fn) {
  if (impl.backend != "nccl" || !t.is_cpu()) {
    fn(t);
    return;
  }
  at::Tensor on_device =
      t.to(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(impl.env.local_rank)));
  fn(on_device);
  t.copy_(on_device);
}

template <typename Fn>
void run_collective(const ProcessGroup& group, const char* what, Fn&& fn) {
  const ProcessGroup::Collective scope(group, what);
  try {
    fn();
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    throw group.explain_failure(what, e.what());
  }
}

}  // namespace

namespace {

// In place, one tensor at a time (Gloo reduces a list only as replicas of one tensor).
void all_reduce(const ProcessGroup& group, ProcessGroupImpl& impl, std::vector<at::Tensor>& tensors,
                c10d::ReduceOp op) {
  if (!impl.group) return;
  run_collective(group, "all_reduce", [&] {
    for (auto& t : tensors) {
      on_backend_device(impl, t, [&](at::Tensor& x) {
        std::vector<at::Tensor> one{x};
        c10d::AllreduceOptions opts;
        opts.reduceOp = op;
        impl.group->allreduce(one, opts)->wait();
      });
    }
  });
}

}  // namespace

void ProcessGroup::all_reduce_sum(std::vector<at::Tensor>& tensors) {
  all_reduce(*this, *impl_, tensors, c10d::ReduceOp::SUM);
}

void ProcessGroup::all_reduce_max(std::vector<at::Tensor>& tensors) {
  all_reduce(*this, *impl_, tensors, c10d::ReduceOp::MAX);
}

void ProcessGroup::broadcast(std::vector<at::Tensor>& tensors, int64_t root) {
  if (!impl_->group || tensors.empty()) return;
  run_collective(*this, "broadcast", [&] {
    constexpr size_t kBucketBytes = 256 * 1024 * 1024;  // as DDP's initial state sync
    if (impl_->backend == "nccl") {
      for (auto& t : tensors) {
        on_backend_device(*impl_, t, [&](at::Tensor& x) {
          std::vector<at::Tensor> one{x};
          c10d::BroadcastOptions opts;
          opts.rootRank = static_cast<int>(root);
          impl_->group->broadcast(one, opts)->wait();
        });
      }
      return;
    }
    c10d::broadcast_coalesced(impl_->group, tensors, kBucketBytes, static_cast<int>(root));
  });
}

std::string ProcessGroup::broadcast_bytes(const std::string& bytes, int64_t root) {
  if (!impl_->group) return bytes;
  std::vector<at::Tensor> size{at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong)};
  broadcast(size, root);
  const int64_t n = size[0].item<int64_t>();
  std::vector<at::Tensor> data{at::empty({n}, at::kByte)};
  if (rank() == root && n > 0) std::memcpy(data[0].data_ptr(), bytes.data(), bytes.size());
  if (n > 0) {
    run_collective(*this, "broadcast", [&] {
      on_backend_device(*impl_, data[0], [&](at::Tensor& x) {
        std::vector<at::Tensor> one{x};
        c10d::BroadcastOptions opts;
        opts.rootRank = static_cast<int>(root);
        impl_->group->broadcast(one, opts)->wait();
      });
    });
  }
  return std::string(static_cast<const char*>(data[0].data_ptr()), static_cast<size_t>(n));
}

void ProcessGroup::barrier() {
  if (!impl_->group) return;
  run_collective(*this, "barrier", [&] { impl_->group->barrier()->wait(); });
}

ProcessGroup::Collective::Collective(const ProcessGroup& group, const char* what) : group_(group) {
  detail::PeerWatch* watch = group_.impl_->watch.get();
  if (watch == nullptr) return;
  watch->enter_collective();
  if (std::optional<std::string> lost = watch->lost()) {
    watch->leave_collective();
    throw DistributedError(fmt::format("rank {}: {} failed: {}", group_.rank(), what, *lost),
                           watch->lost_rank());
  }
}

ProcessGroup::Collective::~Collective() {
  if (detail::PeerWatch* watch = group_.impl_->watch.get()) watch->leave_collective();
}

// ---- agreement ----

std::string ProcessGroup::host_of(int64_t rank) const {
  if (rank < 0 || rank >= static_cast<int64_t>(impl_->peers.size())) return "?";
  return impl_->peers[static_cast<size_t>(rank)].host;
}

std::optional<ProcessGroup::RankDifference> ProcessGroup::first_difference(
    const std::string& topic, const std::string& value) {
  if (!impl_->group) return std::nullopt;
  const std::string prefix = fmt::format("agree/{}/", topic);
  impl_->store->set(prefix + std::to_string(rank()), to_bytes(value));
  barrier();  // every rank's value is in the store
  const std::string chief = from_bytes(impl_->store->get(prefix + "0"));
  for (int64_t r = 1; r < world_size(); ++r) {
    std::string other =
        r == rank() ? value : from_bytes(impl_->store->get(prefix + std::to_string(r)));
    if (other != chief) return RankDifference{r, host_of(r), std::move(other), host_of(0), chief};
  }
  return std::nullopt;
}

// ---- failures ----

void ProcessGroup::report_failure(const std::string& message, bool own_failure) noexcept {
  try {
    // Not when the heartbeats found the store unreachable: the write would wait for the timeout.
    const bool store_lost = impl_->watch && impl_->watch->lost() && impl_->watch->lost_rank() < 0;
    if (impl_->store && !store_lost) {
      // Another rank's failure is recorded apart: the others keep naming the rank that failed
      // first, and do not take this rank's exit for a death.
      impl_->store->set(fmt::format("{}/{}", own_failure ? "failed" : "follows", rank()),
                        to_bytes(message));
    }
  } catch (...) {  // the store may be gone with its host: nothing else to do
  }
  try {
    if (!impl_->env.error_file.empty()) {
      write_torchrun_error_file(impl_->env.error_file, fmt::format("rank {}: {}", rank(), message));
    }
  } catch (const std::exception& e) {
    TP_LOG_WARN("Could not write torchrun's error file {}: {}", impl_->env.error_file, e.what());
  }
}

void ProcessGroup::report_failure_before_joining(const std::string& message,
                                                 DistributedOptions options) noexcept {
  DistributedEnv env;
  try {
    env = options.env() ? *options.env() : DistributedEnv::from_environment();
  } catch (...) {  // no group to tell (the environment itself is the error)
    return;
  }
  if (!env.distributed()) return;
  try {
    if (!env.error_file.empty()) {
      write_torchrun_error_file(env.error_file, fmt::format("rank {}: {}", env.rank, message));
    }
  } catch (const std::exception& e) {
    TP_LOG_WARN("Could not write torchrun's error file {}: {}", env.error_file, e.what());
  }
  try {
    // Rank 0 serves the store unless torchrun does: it starts it to post, and keeps it until
    // every rank has read the failure. The others connect, post and go.
    const bool serves_store = env.rank == 0 && !env.agent_store;
    const std::chrono::milliseconds connect_timeout =
        serves_store ? options.join_timeout()
                     : std::min(options.join_timeout(), std::chrono::milliseconds(10000));
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<c10d::PrefixStore>("trainpack", make_store(env, connect_timeout));
    const detail::JoinStore meeting = join_store(store);
    detail::post_failure_before_joining(meeting, env.rank, this_host(), message);
    if (serves_store) {
      detail::wait_until_failure_known(meeting, env.world_size, options.join_timeout());
    }
  } catch (const std::exception& e) {
    TP_LOG_WARN(
        "Could not tell the other ranks through the rendezvous store at {}:{} that rank {} fails "
        "before joining ({}); they will wait for it up to their join timeout",
        env.master_addr, env.master_port, env.rank, e.what());
  }
}

DistributedError ProcessGroup::explain_failure(const std::string& what,
                                               const std::string& error) const {
  const std::string head = fmt::format("rank {}: {} failed", rank(), what);
  // A peer's sockets close while its process is still exiting: its exit (or its failure record)
  // can show a moment after the collective failed. Look for up to a second before concluding
  // that every rank is alive.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  bool others_elsewhere = false;
  bool store_ok = true;
  std::string secondary;
  while (true) {
    if (std::optional<DistributedError> e =
            find_failed_rank(*impl_, head, error, &others_elsewhere, &store_ok, &secondary)) {
      return *e;
    }
    if (std::chrono::steady_clock::now() >= give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // A rank on another host: its heartbeats tell whether it is gone (its host died, its process
  // ended, or the network to it failed) within the heartbeat timeout.
  if (others_elsewhere && impl_->watch) {
    detail::PeerWatch& watch = *impl_->watch;
    watch.hold_exit();  // this thread reports the loss itself, as a DistributedError
    struct Release {
      detail::PeerWatch& watch;
      ~Release() { watch.release_exit(); }
    } release{watch};
    const auto verdict_by =
        std::chrono::steady_clock::now() + impl_->watch->timeout() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < verdict_by) {
      if (std::optional<std::string> lost = impl_->watch->lost()) {
        return DistributedError(fmt::format("{}: {} (the collective said: {})", head, *lost, error),
                                impl_->watch->lost_rank());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (!secondary.empty()) {
    return DistributedError(fmt::format("{}: {} (the collective said: {})", head, secondary, error),
                            -1);
  }
  return DistributedError(
      fmt::format(
          "{}: {}. No rank reported an error{}; a rank may hang (the timeout is {} s) "
          "or the network between the ranks failed",
          head, error,
          others_elsewhere ? ", and the ranks on this machine are alive" : " and all are alive",
          impl_->timeout.count() / 1000.0),
      -1);
}

}  // namespace trainpack
