// Test support: the message of an exception thrown as another user, for the tests of files and
// folders that the user may not read (the suite runs as root, who may read everything).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

#include "support/errors.h"

namespace trainpack {
namespace testing {

// Runs `f` in a child process as user and group 65534 (nobody) and returns the message of the
// std::exception it threw there ("<no exception>" if none), sent back through a pipe. Needs root
// (callers skip otherwise); "setuid failed", "pipe failed" or "fork failed" when it cannot.
inline std::string message_as_nobody(const std::function<void()>& f) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child < 0) return "fork failed";
  if (child == 0) {
    ::close(fds[0]);
    std::string msg = "setuid failed";
    if (::setgid(65534) == 0 && ::setuid(65534) == 0) msg = message_of(f);
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) {
    msg.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return msg;
}

}  // namespace testing
}  // namespace trainpack
