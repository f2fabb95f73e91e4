// InjectShell (tensorpack's callbacks/misc.py; trainpack/callbacks/misc.h includes this file).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <torch/arg.h>

#include "trainpack/callbacks/console.h"
#include "trainpack/core/callback.h"

namespace trainpack {

struct InjectShellOptions {
  // Where the console reads and writes when a person answers it (default: stdin and stdout).
  TORCH_ARG(ConsoleOptions, console);
  // Whether a person answers the console: unset asks stdin_is_terminal() each time the shell
  // opens; true or false forces the interactive or the file-driven console (tests).
  TORCH_ARG(std::optional<bool>, interactive);
};

// Pauses training when a file appears, to look at the run and steer it: create the file from
// another terminal (`touch INJECT_SHELL.tmp`) and the shell opens at the next trigger.
//
//   callbacks.push_back(std::make_shared<InjectShell>());  // at every epoch end
//   callbacks.push_back(std::make_shared<PeriodicTrigger>(
//       std::make_shared<InjectShell>(), PeriodicTriggerOptions().every_k_steps(100)));
//
// The file: `file` as given, so a relative path is relative to the working directory, as in
// tensorpack (the command a person types next to the running job: `touch INJECT_SHELL.tmp`).
// Give an absolute path (e.g. in the logger directory) to tell several runs apart.
// When: setup_graph logs `Create a file 'INJECT_SHELL.tmp' to open console shell.`. At each
// trigger (every epoch end by default) it checks whether the file exists (one lstat(); nothing
// else happens while it does not). Only a file of the job's effective user counts: one owned by
// another uid (anyone can create a file in a shared, sticky directory such as /tmp) is ignored,
// left in place, with one warning naming the file and its owner's uid per version of it (another
// inode, owner or change time), not one per trigger. A symbolic link there is not followed: the
// job's own is removed with a warning and nothing runs (in a shared directory, a link would make
// the job read, and echo into its log, a file the log's readers may not see). A regular file is
// opened with O_NOFOLLOW and O_NONBLOCK and its type and owner checked again on what was opened
// (fstat); then INFO `File INJECT_SHELL.tmp exists, entering shell.`, the file is removed (so
// that the shell opens once per creation) and, by `shell`:
// - "console": on a terminal (stdin_is_terminal()), the training console (trainpack/callbacks/
//   console.h: stats, history, params, set, save, stop, continue, help) on stdin/stdout, until
//   `continue`, `stop` or end of input. Without a terminal (nohup, a batch job), the file's lines
//   are the commands (`continue` implied at the end; a file over 64 KiB is not read: a warning
//   names it and no command runs) and their output goes to the log (run_console_commands). Each
//   line is echoed there, so what a terminal would act on in it (escape sequences: an OSC 52
//   clipboard write, a cursor move) is written as \xNN first (utils/terminal_text.h,
//   terminal_safe; a trailing '\r' is dropped), and a command holding such bytes is unknown.
//   `stop` throws StopTraining: training ends cleanly at this boundary (every after_train runs).
// - "gdb": logs `[InjectShell] To attach a debugger: gdb -p <pid>` and how to resume, allows
//   any process of the same user to attach (PR_SET_PTRACER, which Yama's ptrace_scope=1 needs;
//   reset after), then stops the process with SIGSTOP; it resumes on SIGCONT (`kill -CONT <pid>`,
//   the shell's `fg`, or detaching gdb and sending SIGCONT).
// after_train removes the file if it exists and is the job's user's.
// Writes: nothing of its own (`save` goes through the run's ModelSaver).
// Data-parallel training: chief_only, so only the chief pauses; the other ranks wait in their
// next collective, which fails when the pause outlasts the process group's timeout (give the
// group a timeout longer than the pause, or keep pauses short).
// chief_only: true.
// Errors: std::invalid_argument naming InjectShell and the argument for an empty `file` or a
// `shell` other than "console" and "gdb". A file that cannot be opened, read or removed is a
// warning.
//
// Differences from tensorpack: a C++ console instead of IPython/pdb (`shell` is "console" or
// "gdb"; tensorpack: "ipython" or "pdb"); the file is removed when the shell opens (tensorpack
// leaves it, and the shell opens again at every trigger until the user deletes it); without a
// terminal the file holds the commands (tensorpack's shell would fail on a closed stdin); the
// "Create a file" line is logged in setup_graph, so only by the chief (tensorpack: at
// construction).
class InjectShell : public Callback {
 public:
  // The largest command file that is read.
  static constexpr int64_t kMaxFileSize = 64 * 1024;

  explicit InjectShell(std::string file = "INJECT_SHELL.tmp", std::string shell = "console",
                       InjectShellOptions options = {});

  const std::string& file() const { return file_; }
  const std::string& shell() const { return shell_; }

 protected:
  void _setup_graph() override;
  void _trigger() override;
  void _after_train() override;

 private:
  // A version of the file: another device, inode, owner or change time is another file.
  struct FileVersion {
    uint64_t device = 0;
    uint64_t inode = 0;
    uint64_t owner = 0;
    int64_t changed_ns = 0;
    bool operator==(const FileVersion& o) const {
      return device == o.device && inode == o.inode && owner == o.owner &&
             changed_ns == o.changed_ns;
    }
  };

  // Whether the file (or a link of that name) exists and is the job's effective user's.
  bool own_file_exists() const;
  // The console on the file open as `fd` (`size` bytes when opened): its lines are the commands
  // without a terminal.
  void open_console(int fd, int64_t size);
  void stop_for_debugger();

  std::string file_;
  std::string shell_;
  InjectShellOptions options_;
  // The other user's file last warned about (reset when there is no file).
  std::optional<FileVersion> refused_;
};

}  // namespace trainpack
