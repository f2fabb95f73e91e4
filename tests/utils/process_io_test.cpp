// protect_process_io and write_console (utils/process_io.h): closed standard descriptors, SIGPIPE,
// case runs in a child process, since it changes the process's descriptors, limits and signals.
#include "trainpack/utils/process_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>

#include "support/temp_dir.h"
#include "trainpack/utils/atomic_file.h"

namespace trainpack {
namespace process_io_test {

namespace fs = std::filesystem;

// Runs `body` in a child process; the child's exit status (its return value), or 128 + the
// signal that ended it.
int in_child(const std::function<int()>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// The device behind `fd`, for comparing with /dev/null.
bool is_dev_null(int fd) {
  struct stat a {
  }, b{};
  return ::fstat(fd, &a) == 0 && ::stat("/dev/null", &b) == 0 && a.st_rdev == b.st_rdev &&
         S_ISCHR(a.st_mode);
}

TEST(ProcessIo, ClosedStandardDescriptorsAreOpenedOnDevNull) {
  EXPECT_EQ(in_child([] {
              ::close(0);
              ::close(1);
              ::close(2);
              protect_process_io();
              if (!is_open(0) || !is_open(1) || !is_open(2)) return 1;
              if (!is_dev_null(0) || !is_dev_null(1) || !is_dev_null(2)) return 2;
              // The next file opened does not take a standard descriptor.
              const int fd = ::open("/dev/null", O_RDONLY);
              return fd > 2 ? 0 : 3;
            }),
            0);
}

TEST(ProcessIo, OpenDescriptorsAreLeftAlone) {
  EXPECT_EQ(in_child([] {
              int pipe_fds[2];
              if (::pipe(pipe_fds) != 0) return 1;
              ::dup2(pipe_fds[1], 1);
              protect_process_io();
              // stdout is still the pipe: what is written there arrives.
              if (::write(1, "x", 1) != 1) return 2;
              char c = 0;
              return ::read(pipe_fds[0], &c, 1) == 1 && c == 'x' ? 0 : 3;
            }),
            0);
}

TEST(ProcessIo, AWriteToAClosedPipeFailsWithEpipeInsteadOfKillingTheProcess) {
  EXPECT_EQ(in_child([] {
              ::signal(SIGPIPE, SIG_DFL);
              protect_process_io();
              int pipe_fds[2];
              if (::pipe(pipe_fds) != 0) return 1;
              ::close(pipe_fds[0]);  // the reader is gone (tee after the terminal closed)
              const ssize_t n = ::write(pipe_fds[1], "x", 1);
              return n == -1 && errno == EPIPE ? 0 : 2;
            }),
            0);
}

TEST(ProcessIo, AHandlerOfTheProgramsOwnIsKept) {
  EXPECT_EQ(in_child([] {
              struct sigaction own {};
              own.sa_handler = [](int) {};
              sigemptyset(&own.sa_mask);
              ::sigaction(SIGPIPE, &own, nullptr);
              protect_process_io();
              struct sigaction now {};
              ::sigaction(SIGPIPE, nullptr, &now);
              return now.sa_handler == own.sa_handler ? 0 : 1;
            }),
            0);
}

class ProcessIoFiles : public testing::TempDirTest {};

// Without any trap of the caller's: past the file-size limit a write fails with EFBIG, named in
// the error with the limit, and the temporary file is removed; the process lives on.
TEST_F(ProcessIoFiles, AFileSizeLimitIsAnErrorNotADeath) {
  const std::string target = (dir() / "model-4.data").string();
  const fs::path d = dir();
  EXPECT_EQ(in_child([&] {
              ::signal(SIGXFSZ, SIG_DFL);
              protect_process_io();
              struct rlimit limit {};
              ::getrlimit(RLIMIT_FSIZE, &limit);
              limit.rlim_cur = 4096;
              ::setrlimit(RLIMIT_FSIZE, &limit);
              try {
                write_file_atomically(target, std::string(100000, 'x'));
                return 1;
              } catch (const std::exception& e) {
                const std::string what = e.what();
                if (what.find("EFBIG: this process may not write files larger than 4096 bytes") ==
                    std::string::npos) {
                  return 2;
                }
                if (what.find("File too large") == std::string::npos) return 3;
              }
              for (const auto& entry : fs::directory_iterator(d)) {
                (void)entry;
                return 4;  // no temporary file, no target
              }
              return 0;
            }),
            0);
}

// A pipe whose write end is full: a reader that stopped reading. Its capacity is one page.
struct FullPipe {
  int read_end = -1;
  std::FILE* write_end = nullptr;

  FullPipe() {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    read_end = fds[0];
    ::fcntl(fds[1], F_SETPIPE_SZ, 4096);
    const int flags = ::fcntl(fds[1], F_GETFL);
    ::fcntl(fds[1], F_SETFL, flags | O_NONBLOCK);
    const char byte = 'x';
    while (::write(fds[1], &byte, 1) == 1) {
    }
    ::fcntl(fds[1], F_SETFL, flags);  // blocking again, as a console is
    write_end = ::fdopen(fds[1], "w");
  }
  ~FullPipe() {
    std::fclose(write_end);
    ::close(read_end);
  }
};

TEST(WriteConsole, WaitsForAReaderThatStoppedUntilAStopIsAskedForThenDropsAndCounts) {
  FullPipe pipe;
  const std::string line(100, 'a');
  auto written =
      std::async(std::launch::async, [&] { return write_console(pipe.write_end, line); });
  // Training waits for the reader, as with any program...
  EXPECT_EQ(written.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  // ...until a stop signal: then the line is dropped, not waited for.
  stop_waiting_for_console();
  ASSERT_EQ(written.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_FALSE(written.get());
  EXPECT_EQ(console_bytes_dropped(), 100u);
  // And later lines are not waited for either.
  EXPECT_FALSE(write_console(pipe.write_end, line));
  EXPECT_EQ(console_bytes_dropped(), 200u);
}

TEST(WriteConsole, WritesEverythingInOrderToAReaderThatReads) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::fcntl(fds[1], F_SETPIPE_SZ, 4096);
  std::FILE* out = ::fdopen(fds[1], "w");
  std::string text;
  for (int i = 0; text.size() < 100000; ++i) text += std::to_string(i) + "\n";
  // Something already in the stream's buffer comes first.
  std::fputs("buffered\n", out);
  auto read = std::async(std::launch::async, [&] {
    std::string got;
    char buffer[1000];
    ssize_t n;
    while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0)
      got.append(buffer, static_cast<size_t>(n));
    return got;
  });
  EXPECT_TRUE(write_console(out, text));
  std::fclose(out);
  EXPECT_EQ(read.get(), "buffered\n" + text);
  ::close(fds[0]);
  EXPECT_EQ(console_bytes_dropped(), 0u);
}

}  // namespace process_io_test
}  // namespace trainpack
