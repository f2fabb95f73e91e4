// Test support: FIFOs (named pipes) where a file is expected, with a guard that keeps a call
// that would block on one from hanging the test.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

namespace trainpack {
namespace testing {

// Creates a FIFO at `p`; fails the test when it cannot.
inline void make_fifo(const std::filesystem::path& p) {
  ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0) << "mkfifo " << p;
}

// While it lives, a thread waits `seconds` and then opens the FIFO at `path` for reading and
// writing (which never blocks on Linux), releasing a call blocked in open() on either end.
// blocked() says whether it had to: the code under test waited on the FIFO.
class FifoGuard {
 public:
  explicit FifoGuard(std::filesystem::path path, int seconds = 3)
      : path_(std::move(path)), thread_([this, seconds] { run(seconds); }) {}
  ~FifoGuard() {
    done_ = true;
    thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  FifoGuard(const FifoGuard&) = delete;
  FifoGuard& operator=(const FifoGuard&) = delete;

  bool blocked() const { return released_; }

 private:
  void run(int seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!done_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (done_) return;
    fd_ = ::open(path_.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    released_ = true;
  }

  std::filesystem::path path_;
  std::atomic<bool> done_{false}, released_{false};
  int fd_ = -1;
  std::thread thread_;
};

}  // namespace testing
}  // namespace trainpack
