// protect_process_io (utils/process_io.h): closed standard descriptors, SIGPIPE and SIGXFSZ. Each
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
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
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

}  // namespace process_io_test
}  // namespace trainpack
