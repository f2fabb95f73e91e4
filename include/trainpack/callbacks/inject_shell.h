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
  // Whether a person answers the console: unset asks stdin_is_terminal() at each opening; true or
  // false forces the interactive or the file-driven console (tests).
  TORCH_ARG(std::optional<bool>, interactive);
};

// tensorpack's InjectShell: pauses training when a file appears, to look at the run and steer it
// (`touch INJECT_SHELL.tmp` from another terminal; a relative `file` is relative to the working
// directory, as in tensorpack).
// When: setup_graph logs `Create a file 'INJECT_SHELL.tmp' to open console shell.` Each trigger
// (every epoch end by default) checks whether the file exists (one lstat()). Only a regular file
// of the job's effective user counts: another user's is ignored and left, with one warning per
// version of it; a symbolic link is not followed (the job's own is removed, with a warning); the
// file is opened without following links or blocking, and checked again. Then INFO `File
// INJECT_SHELL.tmp exists, entering shell.`, the file is removed, and by `shell`:
// - "console": on a terminal, the training console (console.h) until `continue`, `stop` or end of
//   input; without one, the file's lines are the commands (at most kMaxFileSize bytes), run by
//   run_console_commands, each echoed to the log made terminal-safe. `stop` throws StopTraining:
//   training ends cleanly at this boundary.
// - "gdb": logs how to attach a debugger, lets processes of the same user attach
//   (PR_SET_PTRACER), and stops the process with SIGSTOP until SIGCONT.
// after_train removes the job's own file if it exists. chief_only: true (under data-parallel
// training the other ranks wait in their next collective, which fails if the pause outlasts the
// process group's timeout).
// Errors: std::invalid_argument for an empty `file` or a `shell` other than "console" and "gdb";
// a file that cannot be opened, read or removed is a warning.
// See docs/looking-inside.md, "The training console (InjectShell)".
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
  // The console on the file open as `fd` (`size` bytes when opened).
  void open_console(int fd, int64_t size);
  void stop_for_debugger();

  std::string file_;
  std::string shell_;
  InjectShellOptions options_;
  // The other user's file last warned about (reset when there is no file).
  std::optional<FileVersion> refused_;
};

}  // namespace trainpack
