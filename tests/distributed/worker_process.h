// Test support for tests/distributed/: runs trainpack_dp_worker processes as the ranks of a group
// on 127.0.0.1, reads their report lines, and bounds every wait (a test never hangs on a rank).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/child_process.h"
#include "support/files.h"

extern char** environ;

namespace trainpack {
namespace testing {

using SteadyClock = std::chrono::steady_clock;

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0): tests that
// run in parallel never share one.
inline int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (s >= 0) ::close(s);
    return 0;
  }
  ::close(s);
  return ntohs(addr.sin_port);
}

// Whether something listens on 127.0.0.1:port.
inline bool listening(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(s);
  return ok;
}

// The exit code of a wait status: the status, or 128 + the signal that killed the process.
inline int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// One trainpack_dp_worker process: stdout (its report lines) is read through a pipe, stderr (its
// log and errors) goes to a file. The destructor kills and reaps a process still running.
class WorkerProcess {
 public:
  // Starts `program args...` with this process's environment, minus every variable that describes
  // a group (so that the test's own environment cannot leak in), plus `env`.
  WorkerProcess(const std::string& program, const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env, std::filesystem::path stderr_file)
      : stderr_file_(std::move(stderr_file)) {
    std::vector<std::string> vars;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string var = *e;
      const std::string name = var.substr(0, var.find('='));
      if (name == "RANK" || name == "WORLD_SIZE" || name == "LOCAL_RANK" ||
          name == "LOCAL_WORLD_SIZE" || name == "MASTER_ADDR" || name == "MASTER_PORT" ||
          name.rfind("TORCHELASTIC_", 0) == 0 || name.rfind("SLURM_", 0) == 0) {
        continue;
      }
      vars.push_back(var);
    }
    for (const auto& [name, value] : env) vars.push_back(name + "=" + value);
    std::vector<std::string> argv{program};
    argv.insert(argv.end(), args.begin(), args.end());
    SpawnOptions options;
    options.stderr_file = stderr_file_.string();
    options.env = std::move(vars);
    started_ = SteadyClock::now();
    const Spawned child = spawn(argv, options);
    pid_ = child.pid;
    out_fd_ = child.out_fd;
  }
  ~WorkerProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
  }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const {
    if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
  }

  // Reads report lines until one starts with `prefix` (returned), EOF or `seconds`.
  std::optional<std::string> wait_line(const std::string& prefix, double seconds) {
    const SteadyClock::time_point deadline = deadline_in(seconds);
    size_t seen = 0;
    while (true) {
      for (; seen < lines_.size(); ++seen) {
        if (lines_[seen].rfind(prefix, 0) == 0) return lines_[seen];
      }
      if (!read_some(deadline)) return std::nullopt;
    }
  }

  // Waits for the process to end (reading its lines), at most `seconds`; then kills it (a test
  // failure). Returns the exit code (128 + signal when a signal ended it).
  int wait_exit(double seconds) {
    if (reaped_) return exit_code_of(status_);
    const SteadyClock::time_point deadline = deadline_in(seconds);
    while (read_some(deadline)) {
    }
    while (true) {
      const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
      if (r == pid_) break;
      if (r < 0 && errno != EINTR) return -1;
      if (SteadyClock::now() >= deadline) {
        ADD_FAILURE() << "worker " << pid_ << " did not end within " << seconds << " s; killed";
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status_, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    reaped_ = true;
    ended_ = SteadyClock::now();
    return exit_code_of(status_);
  }

  const std::vector<std::string>& lines() const { return lines_; }
  // The first line that starts with `prefix`, or "".
  std::string line(const std::string& prefix) const {
    for (const auto& l : lines_) {
      if (l.rfind(prefix, 0) == 0) return l;
    }
    return "";
  }
  std::string err() const { return read_text(stderr_file_); }
  SteadyClock::time_point ended() const { return ended_; }
  SteadyClock::time_point started() const { return started_; }
  std::string describe() const {
    std::string out = "printed:";
    for (const auto& l : lines_) out += " [" + l + "]";
    return out + "\nstderr:\n" + err();
  }

 private:
  static SteadyClock::time_point deadline_in(double seconds) {
    return SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                    std::chrono::duration<double>(seconds));
  }
  // Reads what is there (waiting until `deadline`); false at EOF or the deadline.
  bool read_some(SteadyClock::time_point deadline) {
    if (out_fd_ < 0) return false;
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now())
              .count();
      if (left <= 0) return false;
      const ReadResult r =
          read_available(out_fd_, static_cast<int>(std::min<int64_t>(left, 100)), &pending_);
      if (r == ReadResult::kNothing) continue;
      if (r == ReadResult::kEnd) {
        ::close(out_fd_);
        out_fd_ = -1;
        return false;
      }
      for (std::string& line : take_lines(&pending_)) lines_.push_back(std::move(line));
      return true;
    }
  }

  std::filesystem::path stderr_file_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  SteadyClock::time_point started_{}, ended_{};
  std::string pending_;
  std::vector<std::string> lines_;
};

// Two ranks on 127.0.0.1 at a free port. Rank 0 starts first; rank 1 once rank 0's rendezvous
// store listens (a client that finds no server retries only after a second).
struct WorkerPair {
  std::unique_ptr<WorkerProcess> rank[2];
  int port = 0;

  // `args[r]`: rank r's arguments; `env[r]`: variables added to rank r's environment. Stderr goes
  // to `dir`/rank<r>.err.
  WorkerPair(const std::string& program, const std::filesystem::path& dir,
             const std::vector<std::string> (&args)[2],
             const std::map<std::string, std::string> (&env)[2] = {{}, {}}) {
    port = free_port();
    for (int r = 0; r < 2; ++r) {
      std::map<std::string, std::string> vars = env[r];
      vars.emplace("RANK", std::to_string(r));
      vars.emplace("WORLD_SIZE", "2");
      vars.emplace("MASTER_ADDR", "127.0.0.1");
      vars.emplace("MASTER_PORT", std::to_string(port));
      if (r == 1) {
        const SteadyClock::time_point give_up = SteadyClock::now() + std::chrono::seconds(20);
        while (!listening(port) && SteadyClock::now() < give_up) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      rank[r] = std::make_unique<WorkerProcess>(program, args[r], vars,
                                                dir / ("rank" + std::to_string(r) + ".err"));
    }
  }
  WorkerProcess& operator[](int r) { return *rank[r]; }
};

}  // namespace testing
}  // namespace trainpack
