#include "trainpack/utils/process_io.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>

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

std::atomic<bool> g_stop_waiting{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
std::atomic<uint64_t> g_dropped{0};

// Waits at most `ms` (-1: for ever) until `fd` can take bytes; false on a timeout.
bool writable(int fd, int ms) {
  pollfd p{fd, POLLOUT, 0};
  const int r = ::poll(&p, 1, ms);
  return r > 0;  // ready, or an error that the write will report
}

}  // namespace

bool write_console(std::FILE* stream, std::string_view text) {
  // Short waits while a reader is slow, so that a stop is noticed within one of them; chunks of
  // at most PIPE_BUF, which a pipe that polls writable takes without blocking.
  constexpr int kWaitMs = 100;
  if (!g_stop_waiting.load(std::memory_order_relaxed)) std::fflush(stream);
  const int fd = ::fileno(stream);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < text.size()) {
    const bool stopping = g_stop_waiting.load(std::memory_order_relaxed);
    if (!writable(fd, stopping ? 0 : kWaitMs)) {
      if (!stopping) continue;
      g_dropped.fetch_add(text.size() - done, std::memory_order_relaxed);
      return false;
    }
    const size_t chunk = std::min<size_t>(text.size() - done, PIPE_BUF);
    const ssize_t n = ::write(fd, text.data() + done, chunk);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;  // EPIPE (SIGPIPE is ignored), EBADF, EIO: nothing more to do for it
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void stop_waiting_for_console() noexcept { g_stop_waiting.store(true, std::memory_order_relaxed); }

uint64_t console_bytes_dropped() { return g_dropped.load(std::memory_order_relaxed); }

void protect_process_io() {
  for (int fd = 0; fd <= 2; ++fd) open_dev_null_if_closed(fd);
  ignore_if_default(SIGPIPE);
  ignore_if_default(SIGXFSZ);
}

}  // namespace trainpack
