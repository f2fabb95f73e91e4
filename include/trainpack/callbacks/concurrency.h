// Running helper processes and threads alongside training (tensorpack's callbacks/concurrency.py).
//
//   Startable          what StartProcOrThread can start and stop
//   StoppableThread    a std::thread with a stop flag
//   ChildProcess       a program started with posix_spawn, stopped with SIGTERM then SIGKILL
//   StartProcOrThread  the callback: starts them in before_train, stops them in after_train
//
// Differences from tensorpack: processes are posix_spawn'ed programs, not fork'ed Python
// processes; stopping a process escalates to SIGKILL after the grace period (tensorpack only
// terminates and joins for 5 s); threads get a stop flag instead of an arbitrary `stop()`.
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

// Something that StartProcOrThread can start and stop: a thread, a child process, or a user's
// own kind. Implementations must be safe to call from any thread, and must leave nothing running
// behind when destroyed (no detached threads, no unreaped children).
//
// Contract of stop(grace): request a stop, wait up to `grace` for it to end, escalate if the kind
// allows it; return true when it has ended (or never started). When it returns false, stop() has
// already logged the ERROR line that says so (StartProcOrThread does not repeat it).
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

// A thread that runs `fn(stop_requested)`; `fn` should return soon after the flag turns true.
// Started by start() (StartProcOrThread: in before_train), stopped by stop() (after_train) or by
// the destructor. stop(grace) sets the flag and waits up to `grace`; if `fn` has not returned it
// logs ERROR `Cannot join thread {name}.` and returns false, and the destructor joins later
// (blocking): the thread is never detached. An exception escaping `fn` is caught on the thread,
// logged as an ERROR with the thread's name and kept in error().
//
//   auto t = std::make_shared<StoppableThread>("sampler", [](const std::atomic<bool>& stop) {
//     while (!stop) sample_once();
//   });
//
// Differences from tensorpack: the stop request is a flag handed to `fn` (tensorpack's
// StoppableThread has a stop event that the thread's own code polls).
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

// A child process running `argv` (argv[0] is looked up in PATH when it has no '/'), started with
// posix_spawnp and SIGINT blocked, so that a Ctrl-C in the terminal reaches only the trainer,
// which then stops the child itself. stop(grace) sends SIGTERM, waits up to `grace`, then logs a
// WARN line, sends SIGKILL and reaps the child: no zombie and no running child is left behind.
// The destructor stops it (with a 5 s grace) if it is still alive.
//
//   auto tb = std::make_shared<ChildProcess>(std::vector<std::string>{"tensorboard", "--logdir",
//                                                                     dir}, "tensorboard");
//
// Differences from tensorpack: posix_spawn'ed programs instead of fork'ed Python processes (no
// state is shared with the trainer, which may have threads); SIGINT is blocked in the child
// rather than ignored (see the comment in start()); escalation to SIGKILL after the grace period.
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

// Starts processes and threads at before_train and stops them at after_train.
// before_train logs `Starting {name1}, {name2} ...` and starts them in order (if one fails to
// start, those already started are stopped and the error ends training). after_train (with
// stop_at_last) logs `Stopping {name} ...` for each item still alive and calls stop(grace); an
// item that does not end is reported by an ERROR `Cannot join thread {name}.` or
// `Cannot join process {name}.`. Runs on every worker (chief_only is false).
//
//   callbacks.push_back(std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{
//       std::make_shared<ChildProcess>(std::vector<std::string>{"nvidia-smi", "-l", "10"})}));
//
// Differences from tensorpack: processes are posix_spawn'ed programs, not fork'ed (so no fork
// warning); a process that ignores SIGTERM is SIGKILLed after `grace` (WARN line); threads are
// StoppableThreads with a stop flag; any Startable (a user's own kind too) is stopped through
// its stop(), and "Stopping <name> ..." is logged for threads as well; a failure to start stops
// what was already started.
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
