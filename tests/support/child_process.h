// Test support: a program started as a child process with its stdout in a pipe (its stderr in a
// file or the same pipe), and the reading of that pipe with bounded waits.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace trainpack {
namespace testing {

struct SpawnOptions {
  // The file the child's stderr goes to, truncated (appended to with `append_stderr`); empty: the
  // pipe, with its stdout.
  std::string stderr_file;
  bool append_stderr = false;
  // The child's environment, one NAME=value each; none: this process's.
  std::optional<std::vector<std::string>> env;
  // Runs in the child just before exec (after fork: async-signal-safe calls only).
  std::function<void()> before_exec;
};

// A started child: its pid and the read end of the pipe its stdout goes to; -1 each when it could
// not be started.
struct Spawned {
  pid_t pid = -1;
  int out_fd = -1;
};

// Starts `argv[0]` with the arguments `argv` (failing the test when pipe or fork fails). The child
// exits with 127 when exec fails.
inline Spawned spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {}) {
  // Everything the child needs, prepared before fork (after it, only async-signal-safe calls).
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  if (options.env) {
    for (const auto& v : *options.env) envp.push_back(const_cast<char*>(v.c_str()));
    envp.push_back(nullptr);
  }
  const std::string& err = options.stderr_file;
  const int err_flags = O_WRONLY | O_CREAT | (options.append_stderr ? O_APPEND : O_TRUNC);
  int fds[2];
  if (::pipe(fds) != 0) {
    ADD_FAILURE() << "pipe: " << std::strerror(errno);
    return {};
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return {};
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], STDOUT_FILENO);
    if (err.empty()) ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[1]);
    if (!err.empty()) {
      const int e = ::open(err.c_str(), err_flags, 0644);
      if (e >= 0) {
        ::dup2(e, STDERR_FILENO);
        ::close(e);
      }
    }
    if (options.before_exec) options.before_exec();
    if (options.env) {
      ::execve(args[0], args.data(), envp.data());
    } else {
      ::execv(args[0], args.data());
    }
    ::_exit(127);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

enum class ReadResult {
  kData,     // some bytes were read
  kNothing,  // none within the wait (or the wait was interrupted by a signal)
  kEnd,      // end of file, or an error
};

// Waits up to `timeout_ms` for `fd` to have something to read, and appends what is there to
// `*out`.
inline ReadResult read_available(int fd, int timeout_ms, std::string* out) {
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, timeout_ms);
  if (ready < 0 && errno != EINTR) return ReadResult::kEnd;
  if (ready <= 0) return ReadResult::kNothing;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return ReadResult::kNothing;
  if (n <= 0) return ReadResult::kEnd;
  out->append(buf, static_cast<size_t>(n));
  return ReadResult::kData;
}

// Removes the complete lines from the front of `*pending` and returns them, without their '\n'.
inline std::vector<std::string> take_lines(std::string* pending) {
  std::vector<std::string> lines;
  size_t eol;
  while ((eol = pending->find('\n')) != std::string::npos) {
    lines.push_back(pending->substr(0, eol));
    pending->erase(0, eol + 1);
  }
  return lines;
}

}  // namespace testing
}  // namespace trainpack
