// InjectShell in a real process (trainpack_shell_child, see its header comment): the console on a
// pseudo-terminal (forkpty: the child's stdin, stdout and stderr), the console without a terminal
// (stdin is /dev/null: the commands come from the file), and the gdb shell (the child stops itself
// with SIGSTOP until it gets SIGCONT). The console's commands in detail are in console_test.cpp.
// Then, in this process (InjectShellFile), which files open the shell: only one of the job's own
// user, never through a symbolic link; and what the file holds reaches the log with its escape
// sequences escaped.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/learning_rate.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/inject_shell.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/value_range.h"

namespace trainpack {
namespace inject_shell_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A guard against a hang, not a timing assertion: every wait gives up after this.
constexpr auto kGiveUp = std::chrono::seconds(60);
constexpr const char* kPrompt = "trainpack> ";

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The lines of `text` that contain `marker`, each from the marker on (the logger's time and colour
// come before it).
std::vector<std::string> lines_with(const std::string& text, const std::string& marker) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find(marker);
    if (at != std::string::npos) out.push_back(line.substr(at));
  }
  return out;
}

// Waits for `pid` to stop or end (waitpid with WUNTRACED), at most kGiveUp; then kills it.
int wait_child(pid_t pid) {
  const auto give_up = Clock::now() + kGiveUp;
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WUNTRACED | WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) {
      ADD_FAILURE() << "waitpid: " << std::strerror(errno);
      return -1;
    }
    if (Clock::now() > give_up) {
      ADD_FAILURE() << "the child did not stop or end within a minute; killed";
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

class InjectShellProcess : public testing::TempDirTest {
 protected:
  std::string file() const { return path("INJECT_SHELL.tmp").string(); }
  std::string log_dir() const { return path("log").string(); }

  std::vector<std::string> args(const std::string& shell, int touch_epoch, int max_epoch) const {
    return {TRAINPACK_SHELL_CHILD,    log_dir(), file(), shell, std::to_string(touch_epoch),
            std::to_string(max_epoch)};
  }

  // Starts the child on a new pseudo-terminal.
  void spawn_on_terminal(const std::vector<std::string>& argv) {
    std::vector<char*> c_argv;
    for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
    c_argv.push_back(nullptr);
    pid_ = ::forkpty(&master_, nullptr, nullptr, nullptr);
    ASSERT_GE(pid_, 0) << "forkpty: " << std::strerror(errno);
    if (pid_ == 0) {
      ::execv(c_argv[0], c_argv.data());
      ::_exit(127);
    }
  }

  // Starts the child with stdin from /dev/null and stdout/stderr into `out`.
  void spawn_without_terminal(const std::vector<std::string>& argv, const fs::path& out) {
    std::vector<char*> c_argv;
    for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
    c_argv.push_back(nullptr);
    const std::string out_path = out.string();
    pid_ = ::fork();
    ASSERT_GE(pid_, 0) << "fork: " << std::strerror(errno);
    if (pid_ == 0) {
      const int in = ::open("/dev/null", O_RDONLY);
      const int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (in < 0 || o < 0) ::_exit(126);
      ::dup2(in, 0);
      ::dup2(o, 1);
      ::dup2(o, 2);
      ::setsid();  // no controlling terminal either
      ::execv(c_argv[0], c_argv.data());
      ::_exit(127);
    }
  }

  // Reads the terminal until `text` appears after what was already returned; returns what was read
  // up to and including it ('\r' removed). Fails the test at the end of output or after kGiveUp.
  std::string read_until(const std::string& text) {
    const auto give_up = Clock::now() + kGiveUp;
    while (true) {
      const auto at = pending_.find(text);
      if (at != std::string::npos) {
        std::string out = pending_.substr(0, at + text.size());
        pending_.erase(0, at + text.size());
        return out;
      }
      if (!read_some(give_up)) {
        ADD_FAILURE() << "'" << text << "' did not come; the terminal showed:\n" << pending_;
        std::string out = std::move(pending_);
        pending_.clear();
        return out;
      }
    }
  }

  // One command: its line, and what the console printed up to the next prompt.
  std::string command(const std::string& line) {
    send(line + "\n");
    return read_until(kPrompt);
  }

  void send(const std::string& bytes) {
    ASSERT_EQ(::write(master_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }

  // Reads the terminal to its end, then waits for the child; returns the rest of the output.
  std::string finish(int* status) {
    const auto give_up = Clock::now() + kGiveUp;
    while (read_some(give_up)) {
    }
    *status = wait_child(pid_);
    pid_ = -1;
    std::string out = std::move(pending_);
    pending_.clear();
    return out;
  }

  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) ::close(master_);
    testing::TempDirTest::TearDown();
  }

  pid_t pid_ = -1;
  int master_ = -1;

 private:
  // Appends what the terminal has to pending_; false at its end (EIO once the child closed it) or
  // after `give_up`.
  bool read_some(Clock::time_point give_up) {
    while (Clock::now() < give_up) {
      pollfd p{master_, POLLIN, 0};
      const int r = ::poll(&p, 1, 100);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(master_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] != '\r') pending_.push_back(buf[i]);
      }
      return true;
    }
    return false;
  }

  std::string pending_;
};

TEST_F(InjectShellProcess, TheConsoleOnATerminal) {
  spawn_on_terminal(args("console", /*touch_epoch=*/2, /*max_epoch=*/3));
  const std::string before = read_until(kPrompt);
  EXPECT_NE(before.find("Create a file '" + file() + "' to open console shell."), std::string::npos)
      << before;
  EXPECT_NE(before.find("File " + file() + " exists, entering shell."), std::string::npos);
  EXPECT_NE(before.find("InjectShell: the file " + file() +
                        " exists.\nTraining is paused at global_step=6 (epoch 2). Type 'help' for "
                        "the commands, 'continue' to resume.\ntrainpack> "),
            std::string::npos)
      << before;
  EXPECT_FALSE(fs::exists(file()));

  EXPECT_EQ(command("stats"),
            "stats\nStatistics at global_step=6 (latest values):\n"
            "  cost = 0.5 (global_step=6)\ntrainpack> ");
  EXPECT_EQ(command("params"),
            "params\nHyperparameters:\n"
            "  global_step = 6 (the step counter; read-only)\n"
            "  learning_rate = 0.1 (finite and > 0)\ntrainpack> ");
  EXPECT_EQ(command("set learning_rate nan"),
            "set learning_rate nan\nset: learning_rate = nan is outside its range (finite and > "
            "0); keeping learning_rate = 0.1\ntrainpack> ");
  const std::string set = command("set learning_rate 0.05");
  EXPECT_EQ(set.rfind("set learning_rate 0.05\nlearning_rate changes from 0.1 to 0.05.\n", 0), 0u)
      << set;
  EXPECT_NE(set.find("[Console] At global_step=6, learning_rate changes from 0.1 to 0.05."),
            std::string::npos)
      << set;
  const std::string save = command("save");
  EXPECT_NE(save.find("Saved model-6 in " + log_dir() + ".\ntrainpack> "), std::string::npos)
      << save;
  EXPECT_EQ(command("what"),
            "what\nUnknown command 'what'. Type 'help' for the commands.\n" + std::string(kPrompt));
  send("continue\n");
  int status = 0;
  const std::string after = finish(&status);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << after;

  const std::string log = read_file(fs::path(log_dir()) / "log.log");
  EXPECT_EQ(lines_with(log, "[report]"),
            std::vector<std::string>({"[report] epoch 1 starts with learning_rate 0.1",
                                      "[report] epoch 2 starts with learning_rate 0.1",
                                      "[report] epoch 3 starts with learning_rate 0.05",
                                      "[report] after_train at global_step=9 epoch=3"}));
  EXPECT_TRUE(fs::exists(fs::path(log_dir()) / "model-6.data"));
  EXPECT_FALSE(fs::exists(fs::path(log_dir()) / "model-9.data"));
  EXPECT_EQ(lines_with(log, "entering shell").size(), 1u);
}

TEST_F(InjectShellProcess, StopOnATerminalEndsTrainingCleanly) {
  spawn_on_terminal(args("console", 1, 3));
  read_until(kPrompt);
  send("stop\n");
  int status = 0;
  const std::string after = finish(&status);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << after;
  const std::string log = read_file(fs::path(log_dir()) / "log.log");
  EXPECT_EQ(lines_with(log, "[report]"),
            std::vector<std::string>({"[report] epoch 1 starts with learning_rate 0.1",
                                      "[report] after_train at global_step=3 epoch=1"}));
  EXPECT_EQ(lines_with(log, "Training was stopped"),
            std::vector<std::string>({"Training was stopped by exception InjectShell: stop from "
                                      "the console at global_step=3."}));
}

TEST_F(InjectShellProcess, CtrlCInTheConsoleStopsTrainingAsTheSignalDoes) {
  spawn_on_terminal(args("console", 1, 3));
  read_until(kPrompt);
  send("\x03");  // the terminal's interrupt character: SIGINT to the child
  int status = 0;
  const std::string after = finish(&status);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 130) << after;  // 128 + SIGINT, as the child reports it
  const std::string log = read_file(fs::path(log_dir()) / "log.log");
  EXPECT_EQ(lines_with(log, "[Console] SIGINT"),
            std::vector<std::string>({"[Console] SIGINT received: leaving the console."}));
  EXPECT_EQ(lines_with(log, "[report] after_train"),
            std::vector<std::string>({"[report] after_train at global_step=3 epoch=1"}));
  EXPECT_TRUE(fs::exists(fs::path(log_dir()) / "model-3.data"));  // ModelSaver's save at a signal
}

TEST_F(InjectShellProcess, WithoutATerminalTheCommandsComeFromTheFile) {
  std::ofstream(file()) << "stats\nset learning_rate 0.02\nset learning_rate nan\nsave\n";
  spawn_without_terminal(args("console", 0, 2), path("out.txt"));
  const int status = wait_child(pid_);
  pid_ = -1;
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << read_file(path("out.txt"));
  const std::string log = read_file(fs::path(log_dir()) / "log.log");
  EXPECT_EQ(lines_with(log, "[Console]"),
            std::vector<std::string>({
                "[Console] InjectShell: the file " + file() + " exists.",
                "[Console] > stats",
                "[Console] Statistics at global_step=3 (latest values):",
                "[Console]   cost = 1.0 (global_step=3)",
                "[Console] > set learning_rate 0.02",
                "[Console] At global_step=3, learning_rate changes from 0.1 to 0.02.",
                "[Console] > set learning_rate nan",
                "[Console] set: learning_rate = nan is outside its range (finite and > 0); "
                "keeping learning_rate = 0.02",
                "[Console] > save",
                "[Console] Saved model-3 in " + log_dir() + ".",
                "[Console] End of the commands: training continues at global_step=3.",
            }));
  EXPECT_EQ(lines_with(log, "[report]"),
            std::vector<std::string>({"[report] epoch 1 starts with learning_rate 0.1",
                                      "[report] epoch 2 starts with learning_rate 0.02",
                                      "[report] after_train at global_step=6 epoch=2"}));
  EXPECT_TRUE(fs::exists(fs::path(log_dir()) / "model-3.data"));
  EXPECT_FALSE(fs::exists(file()));
}

TEST_F(InjectShellProcess, GdbStopsTheProcessUntilSigcont) {
  spawn_without_terminal(args("gdb", 2, 3), path("out.txt"));
  int status = wait_child(pid_);
  ASSERT_TRUE(WIFSTOPPED(status)) << status;
  EXPECT_EQ(WSTOPSIG(status), SIGSTOP);
  const std::string pid = std::to_string(pid_);
  std::string log = read_file(fs::path(log_dir()) / "log.log");
  EXPECT_EQ(lines_with(log, "[InjectShell]"),
            std::vector<std::string>(
                {"[InjectShell] To attach a debugger: gdb -p " + pid,
                 "[InjectShell] Process " + pid +
                     " stops itself now (SIGSTOP); it resumes on SIGCONT: `kill -CONT " + pid +
                     "` (also after detaching the debugger), or `fg` in its shell."}));
  EXPECT_EQ(lines_with(log, "[report] epoch"),
            std::vector<std::string>({"[report] epoch 1 starts with learning_rate 0.1",
                                      "[report] epoch 2 starts with learning_rate 0.1"}));
  EXPECT_FALSE(fs::exists(file()));

  ASSERT_EQ(::kill(pid_, SIGCONT), 0);
  status = wait_child(pid_);
  pid_ = -1;
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  log = read_file(fs::path(log_dir()) / "log.log");
  EXPECT_EQ(
      lines_with(log, "[InjectShell] Continued"),
      std::vector<std::string>({"[InjectShell] Continued: training resumes at global_step=6."}));
  EXPECT_EQ(lines_with(log, "[report] after_train"),
            std::vector<std::string>({"[report] after_train at global_step=9 epoch=3"}));
}

TEST_F(InjectShellProcess, AStepTriggerPausesAtThatStep) {
  std::vector<std::string> a = args("console", 1, 2);
  a.push_back("2");  // every 2 steps: global_step 2 is inside epoch 1 (3 steps)
  spawn_on_terminal(a);
  const std::string before = read_until(kPrompt);
  EXPECT_NE(before.find("Training is paused at global_step=2 (epoch 1)."), std::string::npos)
      << before;
  send("\x04");  // Ctrl-D: end of input, training continues
  int status = 0;
  const std::string after = finish(&status);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << after;
  const std::string log = read_file(fs::path(log_dir()) / "log.log");
  EXPECT_EQ(
      lines_with(log, "[Console] End of input"),
      std::vector<std::string>({"[Console] End of input: training continues at global_step=2."}));
  EXPECT_EQ(lines_with(log, "[report] after_train"),
            std::vector<std::string>({"[report] after_train at global_step=6 epoch=2"}));
}

// ---- in this process: which file opens the shell, and what of it reaches the log ----

// A uid that is not the job's (the tests give files to it with chown, as root).
constexpr uid_t kOtherUid = 4242;

class InjectShellFile : public testing::TempDirTest {
 protected:
  std::string file() const { return path("INJECT_SHELL.tmp").string(); }

  // Trains a NoOpTrainer (2 steps per epoch, epochs 1..max_epoch, a `learning_rate` variable)
  // with `at_epoch` run in every before_epoch and then an InjectShell on file() whose console
  // reads its commands from the file (no terminal). Returns the last epoch trained.
  int64_t run(int64_t max_epoch, std::function<void(int64_t)> at_epoch = {}) {
    double lr = 0.1;
    NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    testing::add_learning_rate_variable(trainer.graph(), &lr);
    int64_t last_epoch = 0;
    auto before = std::make_shared<testing::ActionCallback>();
    before->before_epoch_fn = [&](testing::ActionCallback& self) {
      last_epoch = self.epoch_num();
      if (at_epoch) at_epoch(self.epoch_num());
    };
    auto shell =
        std::make_shared<InjectShell>(file(), "console", InjectShellOptions().interactive(false));
    trainer.train({before, shell}, {}, 2, 1, max_epoch);
    return last_epoch;
  }

  static int count(const testing::LogCapture& log, const std::string& text) {
    int n = 0;
    for (const auto& line : log.lines()) n += line.find(text) != std::string::npos ? 1 : 0;
    return n;
  }
};

TEST_F(InjectShellFile, EscapeSequencesInTheFileReachNeitherTheLogNorTheTerminal) {
  logger::set_logger_dir(path("log").string(), 'k');
  // An OSC 52 clipboard write, a screen clear with a CRLF line end, a C1 CSI (UTF-8) and a lone
  // 0x9b byte (CSI to a terminal in an 8-bit mode); then a command that works.
  std::ofstream(file()) << "\x1b]52;c;cHduZWQ=\x07\n"
                        << "set learning_rate 0.5\x1b[2J\r\n"
                        << "\xc2\x9b"
                        << "31mred \x9b"
                        << "32mgreen\n"
                        << "set learning_rate 0.02\r\n";
  testing::LogCapture log;
  EXPECT_EQ(run(2), 2);
  for (const auto& line : log.lines()) {
    for (const char c : line) {
      const auto byte = static_cast<unsigned char>(c);
      EXPECT_TRUE((byte >= 0x20 || c == '\n' || c == '\t') && byte != 0x7f && byte != 0x9b) << line;
    }
  }
  EXPECT_EQ(count(log, "[Console] > \\x1b]52;c;cHduZWQ=\\x07"), 1);
  EXPECT_EQ(count(log, "[Console] > set learning_rate 0.5\\x1b[2J"), 1);
  EXPECT_EQ(count(log, "[Console] > \\xc2\\x9b31mred \\x9b32mgreen"), 1);
  // The CRLF line's command still runs (its '\r' is a line end, not part of it).
  EXPECT_EQ(count(log, "[Console] At global_step=2, learning_rate changes from 0.1 to 0.02."), 1);
  const std::string text = read_file(path("log") / "log.log");
  EXPECT_NE(text.find("\\x1b]52;c;cHduZWQ=\\x07"), std::string::npos);
  EXPECT_EQ(text.find("\x07"), std::string::npos);
  EXPECT_EQ(text.find("\x1b]"), std::string::npos);
  EXPECT_EQ(text.find("\x1b[2J"), std::string::npos);
  EXPECT_EQ(text.find("\x9b"), std::string::npos);
}

TEST_F(InjectShellFile, AnotherUsersFileIsIgnoredWithOneWarningPerVersion) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root, to give the file to another uid (chown); run as root to test it";
  }
  // Someone else's file in a shared directory: `stop` would end training at epoch 1.
  std::ofstream(file()) << "stop\n";
  ASSERT_EQ(::chown(file().c_str(), kOtherUid, kOtherUid), 0) << std::strerror(errno);
  testing::LogCapture log;
  const int64_t last = run(5, [&](int64_t epoch) {
    // Another version of it at epoch 4: given to another uid.
    if (epoch == 4) {
      ASSERT_EQ(::chown(file().c_str(), kOtherUid + 1, kOtherUid + 1), 0);
    }
  });
  EXPECT_EQ(last, 5);
  EXPECT_EQ(count(log, "entering shell"), 0);
  EXPECT_EQ(count(log, "[Console]"), 0);
  const std::string warning = "WRN [InjectShell] " + file() + " is a file owned by uid ";
  EXPECT_EQ(count(log, warning + "4242, not by this job's user (uid 0): it is ignored"), 1);
  EXPECT_EQ(count(log, warning + "4243, not by this job's user (uid 0)"), 1);
  EXPECT_EQ(count(log, "create it as uid 0, or give InjectShell a path in a directory of your own"),
            2);
  // Not removed, by the trigger or by after_train: it is not the job's.
  EXPECT_TRUE(fs::exists(file()));
}

TEST_F(InjectShellFile, AnotherUsersFileDoesNotHideTheJobsOwnLater) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root, to give the file to another uid (chown); run as root to test it";
  }
  std::ofstream(file()) << "stop\n";
  ASSERT_EQ(::chown(file().c_str(), kOtherUid, kOtherUid), 0) << std::strerror(errno);
  testing::LogCapture log;
  const int64_t last = run(5, [&](int64_t epoch) {
    if (epoch == 3) {  // its owner removes it, and the job's user creates one
      fs::remove(file());
      std::ofstream(file()) << "stop\n";
    }
  });
  EXPECT_EQ(last, 3);  // stopped by the job's own file at the end of epoch 3
  EXPECT_EQ(count(log, "owned by uid 4242"), 1);
  EXPECT_EQ(count(log, "entering shell"), 1);
  EXPECT_FALSE(fs::exists(file()));
}

TEST_F(InjectShellFile, ASymbolicLinkIsNeitherFollowedNorRead) {
  std::ofstream(path("private")) << "stop\n";
  fs::create_symlink(path("private"), file());
  testing::LogCapture log;
  EXPECT_EQ(run(2), 2);
  EXPECT_EQ(count(log, "WRN [InjectShell] " + file() +
                           " is a symbolic link and is not followed; removed it."),
            1);
  EXPECT_EQ(count(log, "entering shell"), 0);
  EXPECT_FALSE(fs::is_symlink(file()));
  EXPECT_EQ(read_file(path("private")), "stop\n");
  if (::geteuid() != 0) return;
  // Another user's link is theirs: left in place, one warning.
  fs::create_symlink(path("private"), file());
  ASSERT_EQ(::lchown(file().c_str(), kOtherUid, kOtherUid), 0) << std::strerror(errno);
  testing::LogCapture again;
  EXPECT_EQ(run(3), 3);
  EXPECT_EQ(count(again, file() + " is a symbolic link owned by uid 4242"), 1);
  EXPECT_EQ(count(again, "entering shell"), 0);
  EXPECT_TRUE(fs::is_symlink(file()));
}

TEST_F(InjectShellFile, AFileOverTheLimitRunsNoCommand) {
  std::ofstream(file()) << "stop\n" << std::string(InjectShell::kMaxFileSize, '#') << "\n";
  testing::LogCapture log;
  EXPECT_EQ(run(2), 2);
  EXPECT_EQ(count(log, "WRN [InjectShell] " + file() + " is " +
                           std::to_string(InjectShell::kMaxFileSize + 6) +
                           " bytes, more than the 65536-byte limit for a console command file; "
                           "no commands are run."),
            1);
  EXPECT_EQ(count(log, "entering shell"), 1);
  EXPECT_FALSE(fs::exists(file()));
}

}  // namespace inject_shell_test
}  // namespace trainpack
