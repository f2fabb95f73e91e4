// The shell command that SendStat and SendMonitorData run: a template with `{stat}` placeholders
// filled with numbers (tensorpack's `os.system(command.format(**values))`). Placeholders are stat
// names verbatim (`{Throughput (steps/sec)}`); `{{` and `}}` are literal braces. Values are
// written as Python's `repr(float)` writes them (`0.1`, `1.0`, `1e-05`), never as text taken from
// a stat. No format specs or conversions (`{cost:.3f}`); a bad template fails at construction
// (docs/tensorpack-differences.md #27).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trainpack {

class CommandTemplate {
 public:
  // Parses `command`. `owner` (the class name) starts every error message. Throws
  // std::invalid_argument naming the owner, the command and the offending placeholder when a
  // placeholder is not one of `names` or is empty, and naming the position when a brace is
  // unbalanced ('{' never closed, '{' inside a placeholder, a single '}').
  CommandTemplate(std::string owner, std::string command, std::vector<std::string> names);

  const std::string& command() const { return command_; }
  // The distinct names, in the order first given; fill() takes one value per name in this order.
  const std::vector<std::string>& names() const { return names_; }
  // The position of `name` in names(), or -1.
  int index_of(std::string_view name) const;

  // The command with every placeholder replaced by its value. Throws std::invalid_argument if
  // `values` does not hold one value per name.
  std::string fill(const std::vector<double>& values) const;

 private:
  struct Piece {
    std::string literal;  // text before the placeholder (braces unescaped)
    int name = -1;        // index into names_, or -1 for the trailing literal
  };
  std::string owner_;
  std::string command_;
  std::vector<std::string> names_;
  std::vector<Piece> pieces_;
};

// Runs `command` through `/bin/sh -c` and waits for it (the calling thread blocks, as tensorpack's
// os.system does). Returns the shell's exit status, -N when the shell was killed by signal N, and
// 127 when it could not be started. stdout and stderr are flushed first; the command inherits them.
int run_shell_command(const std::string& command);

}  // namespace trainpack
