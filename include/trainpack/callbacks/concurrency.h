// Running helper processes and threads alongside training (tensorpack's
// callbacks/concurrency.py): Startable, StoppableThread, ChildProcess, and the callback
// StartProcOrThread. See docs/callbacks.md, "Threads and processes beside training".
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/callback.h"

namespace trainpack {

// Something that StartProcOrThread can start and stop: a thread, a child process, or a user's own
// kind. Safe to call from any thread; leaves nothing running when destroyed (no detached thread,
// no unreaped child). stop(grace): request a stop, wait up to `grace`, escalate if the kind
// allows; true when it has ended (or never started); when false, stop() has logged the ERROR.
class Startable {
 public:
  virtual ~Startable();
  // What logs print for it.
  virtual std::string name() const = 0;
  // Starts it; throws when it cannot be started, or when it was started before.
  virtual void start() = 0;
  // True from a successful start() until it has ended.
  virtual bool alive() const = 0;
  virtual bool stop(std::chrono::milliseconds grace) = 0;
};
using StartablePtr = std::shared_ptr<Startable>;

// tensorpack's StoppableThread: a thread that runs `fn(stop_requested)`; `fn` should return soon
// after the flag turns true. stop(grace) sets the flag and waits up to `grace`; if `fn` has not
// returned, it logs ERROR `Cannot join thread {name}.` and returns false, and the destructor joins
// later (blocking): the thread is never detached. An exception escaping `fn` is logged as an
// ERROR with the thread's name and kept in error().
class StoppableThread : public Startable {
 public:
  using Fn = std::function<void(const std::atomic<bool>& stop_requested)>;

  // Throws std::invalid_argument when `fn` is empty. An empty name becomes "StoppableThread".
  StoppableThread(std::string name, Fn fn);
  // Requests a stop and joins the thread (blocking) if it was started.
  ~StoppableThread() override;
  StoppableThread(const StoppableThread&) = delete;
  StoppableThread& operator=(const StoppableThread&) = delete;

  std::string name() const override { return name_; }
  // Starts the thread; std::logic_error if it was started before.
  void start() override;
  bool alive() const override;
  // Not from inside `fn` (a thread cannot join itself): `fn` just returns instead.
  bool stop(std::chrono::milliseconds grace) override;

  bool stop_requested() const { return stop_requested_.load(); }
  // The exception that escaped `fn`, or nullptr (valid once the thread has ended).
  std::exception_ptr error() const;

 private:
  void run();
  // Joins the thread if that has not been done (never from the thread itself).
  void join();

  const std::string name_;
  Fn fn_;
  std::atomic<bool> stop_requested_{false};

  mutable std::mutex mutex_;
  std::condition_variable finished_cv_;
  bool started_ = false;   // guarded by mutex_
  bool finished_ = false;  // guarded by mutex_: fn has returned (or thrown)
  std::exception_ptr error_;

  std::mutex join_mutex_;  // serialises join() between stop() and the destructor
  std::thread thread_;
};

// A child process running `argv` (argv[0] looked up in PATH when it has no '/'), started with
// posix_spawnp (not fork, as tensorpack's Python processes are) and SIGINT blocked, so that a
// Ctrl-C reaches only the trainer, which then stops the child. stop(grace) sends SIGTERM, waits
// up to `grace`, then logs a WARN line, sends SIGKILL and reaps the child: no zombie and no
// running child is left behind. The destructor stops it (5 s grace) if it is still alive.
class ChildProcess : public Startable {
 public:
  // Throws std::invalid_argument when `argv` or argv[0] is empty. An empty name becomes argv[0].
  explicit ChildProcess(std::vector<std::string> argv, std::string name = "");
  ~ChildProcess() override;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  std::string name() const override { return name_; }
  // Spawns the program; std::runtime_error naming the program and the reason when posix_spawnp
  // fails (for instance: not found), std::logic_error when it was started before.
  void start() override;
  // Reaps the child when it has exited (waitpid WNOHANG).
  bool alive() const override;
  bool stop(std::chrono::milliseconds grace) override;

  // The child's pid, or -1 before start().
  pid_t pid() const;
  // Once it has ended and been reaped: the exit code, or -N when signal N killed it (as
  // Python's Popen.returncode). nullopt while it runs, before start(), or when the status was
  // lost (SIGCHLD ignored by the application, so the kernel reaped the child).
  std::optional<int> exit_status() const;
  const std::vector<std::string>& argv() const { return argv_; }

 private:
  // With mutex_ held: waitpid(pid_, options) once (retrying on EINTR); records the status when
  // the child has been reaped. Returns true when it has ended.
  bool reap_locked(int options) const;

  const std::vector<std::string> argv_;
  const std::string name_;

  mutable std::mutex mutex_;
  pid_t pid_ = -1;                          // guarded by mutex_
  mutable bool ended_ = false;              // guarded by mutex_: reaped; the pid is not ours
  mutable std::optional<int> exit_status_;  // guarded by mutex_
};

struct StartProcOrThreadOptions {
  // Stop every started item in after_train. When false, they run until their own destructors
  // (when the last reference to them goes).
  TORCH_ARG(bool, stop_at_last) = true;
  // How long stop() waits for each item before escalating (a process) or giving up (a thread).
  TORCH_ARG(std::chrono::milliseconds, grace) = std::chrono::milliseconds(5000);
};

// tensorpack's StartProcOrThread: starts processes and threads at before_train and stops them at
// after_train. before_train logs `Starting {name1}, {name2} ...` and starts them in order (if one
// fails, those started are stopped and the error ends training). after_train (with stop_at_last)
// logs `Stopping {name} ...` for each item still alive and calls stop(grace); one that does not
// end is an ERROR `Cannot join thread {name}.` or `Cannot join process {name}.`. chief_only:
// false (runs on every worker). Differences from tensorpack: docs/tensorpack-differences.md #40.
class StartProcOrThread : public Callback {
 public:
  // Throws std::invalid_argument when `startables` is empty or holds a null entry, or when the
  // grace period is negative.
  explicit StartProcOrThread(std::vector<StartablePtr> startables,
                             StartProcOrThreadOptions options = {});

  std::string name() const override { return "StartProcOrThread"; }
  const std::vector<StartablePtr>& startables() const { return startables_; }

 protected:
  void _before_train() override;
  void _after_train() override;

 private:
  // Stops each alive item (logging `Stopping {name} ...`); an exception from one item's stop()
  // is logged and the next item is still stopped.
  void stop_all(const std::vector<StartablePtr>& items);

  std::vector<StartablePtr> startables_;
  StartProcOrThreadOptions options_;
};

}  // namespace trainpack
