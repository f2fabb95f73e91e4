#include "trainpack/utils/process_io.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace trainpack {

namespace {

// Opens /dev/null on `fd` when it is closed. open() returns the lowest free descriptor, so with
// 0, 1 and 2 checked in order the one it returns is `fd` itself; dup2 covers any other case.
void open_dev_null_if_closed(int fd) {
  if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) return;
  const int opened = ::open("/dev/null", O_RDWR);
  if (opened < 0 || opened == fd) return;
  ::dup2(opened, fd);
  ::close(opened);
}

// SIG_IGN for `sig` when its action is the default one (a handler or SIG_IGN stays).
void ignore_if_default(int sig) {
  struct sigaction current {};
  if (::sigaction(sig, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(sig, &ignore, nullptr);
}

}  // namespace

void protect_process_io() {
  for (int fd = 0; fd <= 2; ++fd) open_dev_null_if_closed(fd);
  ignore_if_default(SIGPIPE);
  ignore_if_default(SIGXFSZ);
}

}  // namespace trainpack
