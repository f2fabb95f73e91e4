#include "trainpack/callbacks/concurrency.h"

#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "trainpack/utils/logger.h"

extern char** environ;  // the parent's environment, handed to the child unchanged

namespace trainpack {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// How long stop() waits for the child to be reaped after SIGKILL. SIGKILL cannot be caught, but
// a process in uninterruptible sleep (a hung network mount) ends only when its I/O does; stop()
// then reports the failure and the destructor waits without a bound.
constexpr milliseconds kKillWait{5000};
// The grace period of the destructors' stop (tensorpack's join timeout).
constexpr milliseconds kDestructorGrace{5000};

// Caps a wait at about 100 years, so that `now() + wait` cannot overflow the clock (a caller
// may pass milliseconds::max() to mean "wait as long as it takes").
milliseconds capped(milliseconds wait) {
  return std::min(wait,
                  std::chrono::duration_cast<milliseconds>(std::chrono::hours(24 * 365 * 100)));
}

// Polls `done` (called with no lock held) until it returns true or `timeout` has passed; the
// poll interval grows from 1 ms to 20 ms. Returns the last value of `done`.
template <typename Done>
bool poll_until(milliseconds timeout, Done&& done) {
  const auto deadline = SteadyClock::now() + capped(timeout);
  milliseconds interval{1};
  while (!done()) {
    const auto now = SteadyClock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<SteadyClock::duration>(interval, deadline - now));
    interval = std::min(interval * 2, milliseconds{20});
  }
  return true;
}

}  // namespace

Startable::~Startable() = default;

// ---- StoppableThread ----

StoppableThread::StoppableThread(std::string name, Fn fn)
    : name_(name.empty() ? "StoppableThread" : std::move(name)), fn_(std::move(fn)) {
  if (!fn_) {
    throw std::invalid_argument(
        fmt::format("StoppableThread: fn must not be empty (thread '{}')", name_));
  }
}

StoppableThread::~StoppableThread() {
  stop_requested_.store(true);
  join();
}

void StoppableThread::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (started_) {
    throw std::logic_error(fmt::format("StoppableThread {}: start() was called twice", name_));
  }
  // mutex_ is held until thread_ is assigned: run() takes it before setting finished_, so
  // whoever sees finished_ also sees thread_.
  thread_ = std::thread(&StoppableThread::run, this);
  started_ = true;
}

void StoppableThread::run() {
  std::exception_ptr error;
  try {
    fn_(stop_requested_);
  } catch (const std::exception& e) {
    error = std::current_exception();
    TP_LOG_ERROR("Exception in thread {}: {}", name_, e.what());
  } catch (...) {
    error = std::current_exception();
    TP_LOG_ERROR("Exception in thread {}: unknown exception", name_);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error;
    finished_ = true;
  }
  // The destructor joins this thread before the object goes, so notifying unlocked is safe.
  finished_cv_.notify_all();
}

bool StoppableThread::alive() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return started_ && !finished_;
}

bool StoppableThread::stop(milliseconds grace) {
  stop_requested_.store(true);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!started_) return true;
    if (!finished_cv_.wait_for(lock, capped(grace), [this] { return finished_; })) {
      lock.unlock();
      TP_LOG_ERROR("Cannot join thread {}.", name_);
      return false;
    }
  }
  join();  // fn has returned: this join does not block for long
  return true;
}

std::exception_ptr StoppableThread::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void StoppableThread::join() {
  std::lock_guard<std::mutex> lock(join_mutex_);
  if (thread_.joinable()) thread_.join();
}

// ---- ChildProcess ----

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string name)
    : argv_(std::move(argv)),
      name_(!name.empty()   ? std::move(name)
            : argv_.empty() ? std::string()
                            : argv_[0]) {
  if (argv_.empty()) throw std::invalid_argument("ChildProcess: argv must not be empty");
  if (argv_[0].empty()) throw std::invalid_argument("ChildProcess: argv[0] must not be empty");
}

ChildProcess::~ChildProcess() {
  try {
    if (alive() && !stop(kDestructorGrace)) {
      // stop() sent SIGKILL already; wait for the kernel to finish the child, however long.
      std::lock_guard<std::mutex> lock(mutex_);
      reap_locked(0);
    }
  } catch (...) {
    // Only logging can throw here (bad_alloc); the child was signalled or reaped before that.
  }
}

void ChildProcess::start() {
  std::vector<char*> args;
  args.reserve(argv_.size() + 1);
  for (const auto& arg : argv_) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  // SIGINT: a Ctrl-C in the terminal goes to the whole foreground process group, and only the
  // trainer should act on it (it then stops the child in after_train). tensorpack starts its
  // processes with SIGINT ignored; posix_spawn cannot make a signal ignored in the child (an
  // ignored disposition is inherited only from the parent), and ignoring SIGINT in the parent
  // around the spawn would drop a Ctrl-C that arrives meanwhile and change process-wide state
  // under other threads. So the child starts with SIGINT *blocked* (POSIX_SPAWN_SETSIGMASK;
  // the mask survives exec): a Ctrl-C stays pending in it and never ends it, unless the program
  // unblocks SIGINT itself. The child stays in the trainer's process group, so a signal sent to
  // the whole job (SIGTERM from a scheduler, SIGHUP) still reaches it.
  // The mask is otherwise empty (the calling thread may block signals for its own reasons), and
  // SIGTERM is reset to its default action (POSIX_SPAWN_SETSIGDEF) in case the trainer was
  // started with SIGTERM ignored: stop() relies on it. Handlers the trainer installed are reset
  // by exec anyway.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGTERM);

  posix_spawnattr_t attr;
  int rc = posix_spawnattr_init(&attr);
  if (rc != 0) {
    throw std::runtime_error(fmt::format("ChildProcess: cannot start '{}': {}", argv_[0],
                                         std::generic_category().message(rc)));
  }
  rc = posix_spawnattr_setsigmask(&attr, &mask);
  if (rc == 0) rc = posix_spawnattr_setsigdefault(&attr, &defaults);
  if (rc == 0) rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::lock_guard<std::mutex> lock(mutex_);
  if (pid_ != -1) {
    posix_spawnattr_destroy(&attr);
    throw std::logic_error(fmt::format("ChildProcess {}: start() was called twice", name_));
  }
  pid_t pid = -1;
  // posix_spawnp searches PATH when argv[0] has no '/'; glibc reports a failed exec (not found,
  // not executable) as its return value, before any child is left behind.
  if (rc == 0) rc = posix_spawnp(&pid, argv_[0].c_str(), nullptr, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    throw std::runtime_error(fmt::format("ChildProcess: cannot start '{}': {}", argv_[0],
                                         std::generic_category().message(rc)));
  }
  pid_ = pid;
}

bool ChildProcess::reap_locked(int options) const {
  if (ended_) return true;
  if (pid_ == -1) return false;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, options);
  } while (r == -1 && errno == EINTR);
  if (r == 0) return false;  // WNOHANG: still running
  ended_ = true;
  if (r == pid_ && WIFEXITED(status)) {
    exit_status_ = WEXITSTATUS(status);
  } else if (r == pid_ && WIFSIGNALED(status)) {
    exit_status_ = -WTERMSIG(status);
  } else {
    // ECHILD: the application ignores SIGCHLD, so the kernel reaped the child and its status is
    // gone. Either way the pid is no longer ours to signal.
    exit_status_.reset();
  }
  return true;
}

bool ChildProcess::alive() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pid_ != -1 && !reap_locked(WNOHANG);
}

bool ChildProcess::stop(milliseconds grace) {
  // Signals are sent only with mutex_ held and after checking that the child has not been
  // reaped: an unreaped child (even a zombie) keeps its pid, so the signal cannot hit a stranger.
  auto ended = [this] {
    std::lock_guard<std::mutex> lock(mutex_);
    return reap_locked(WNOHANG);
  };
  pid_t pid;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pid_ == -1 || reap_locked(WNOHANG)) return true;
    pid = pid_;
    ::kill(pid_, SIGTERM);
  }
  if (poll_until(grace, ended)) return true;

  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (reap_locked(WNOHANG)) return true;
    ::kill(pid_, SIGKILL);
  }
  TP_LOG_WARN("Process {} (pid {}) did not exit within {} ms of SIGTERM; sent SIGKILL.", name_, pid,
              grace.count());
  if (poll_until(kKillWait, ended)) return true;
  TP_LOG_ERROR("Cannot join process {}.", name_);
  return false;
}

pid_t ChildProcess::pid() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pid_;
}

std::optional<int> ChildProcess::exit_status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exit_status_;
}

// ---- StartProcOrThread ----

StartProcOrThread::StartProcOrThread(std::vector<StartablePtr> startables,
                                     StartProcOrThreadOptions options)
    : startables_(std::move(startables)), options_(options) {
  if (startables_.empty()) {
    throw std::invalid_argument("StartProcOrThread: startables must not be empty");
  }
  for (size_t i = 0; i < startables_.size(); ++i) {
    if (!startables_[i]) {
      throw std::invalid_argument(fmt::format("StartProcOrThread: startables[{}] is null", i));
    }
  }
  if (options_.grace().count() < 0) {
    throw std::invalid_argument(fmt::format("StartProcOrThread: grace must be >= 0 ms, got {} ms",
                                            options_.grace().count()));
  }
  set_chief_only(false);
}

void StartProcOrThread::_before_train() {
  std::string names;
  for (const auto& item : startables_) {
    if (!names.empty()) names += ", ";
    names += item->name();
  }
  TP_LOG_INFO("Starting {} ...", names);
  std::vector<StartablePtr> started;
  started.reserve(startables_.size());
  for (const auto& item : startables_) {
    try {
      item->start();
    } catch (...) {
      // Training fails with this error; leave nothing of this callback running (even with
      // stop_at_last false, which concerns a successful start).
      stop_all(started);
      throw;
    }
    started.push_back(item);
  }
}

void StartProcOrThread::_after_train() {
  if (options_.stop_at_last()) stop_all(startables_);
}

void StartProcOrThread::stop_all(const std::vector<StartablePtr>& items) {
  for (const auto& item : items) {
    try {
      if (!item->alive()) continue;
      TP_LOG_INFO("Stopping {} ...", item->name());
      item->stop(options_.grace());  // a failure was logged by stop() itself
    } catch (const std::exception& e) {
      TP_LOG_ERROR("Exception while stopping {}: {}", item->name(), e.what());
    } catch (...) {
      TP_LOG_ERROR("Exception while stopping {}: unknown exception", item->name());
    }
  }
}

}  // namespace trainpack
