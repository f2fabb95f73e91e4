#include "trainpack/utils/command_template.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>

#include "trainpack/utils/float_repr.h"

extern char** environ;

namespace trainpack {
namespace {

std::string quoted_list(const std::vector<std::string>& names) {
  if (names.empty()) return "(none)";
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ", ";
    out += "'" + n + "'";
  }
  return out;
}

}  // namespace

CommandTemplate::CommandTemplate(std::string owner, std::string command,
                                 std::vector<std::string> names)
    : owner_(std::move(owner)), command_(std::move(command)) {
  for (auto& n : names) {
    if (index_of(n) < 0) names_.push_back(std::move(n));
  }
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument(
        fmt::format("{}: {} in the command template '{}'", owner_, what, command_));
  };
  // str.format's grammar without format specs: "{{" and "}}" are literal braces, "{name}" a
  // placeholder, any other brace an error.
  std::string literal;
  const size_t n = command_.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = command_[i];
    if (c == '}') {
      if (i + 1 < n && command_[i + 1] == '}') {
        literal += '}';
        ++i;
        continue;
      }
      fail(fmt::format("single '}}' at position {} (write '}}}}' for a literal brace)", i));
    }
    if (c != '{') {
      literal += c;
      continue;
    }
    if (i + 1 < n && command_[i + 1] == '{') {
      literal += '{';
      ++i;
      continue;
    }
    const size_t start = i;
    size_t end = start + 1;
    while (end < n && command_[end] != '}' && command_[end] != '{') ++end;
    if (end == n) {
      fail(fmt::format("'{{' at position {} is never closed (write '{{{{' for a literal brace)",
                       start));
    }
    if (command_[end] == '{') {
      fail(fmt::format("'{{' at position {} inside the placeholder that starts at position {}", end,
                       start));
    }
    const std::string name = command_.substr(start + 1, end - start - 1);
    if (name.empty()) {
      fail(
          fmt::format("empty placeholder '{{}}' at position {} (placeholders name a stat)", start));
    }
    const int index = index_of(name);
    if (index < 0) {
      fail(fmt::format("unknown placeholder '{{{}}}' (not one of the names: {})", name,
                       quoted_list(names_)));
    }
    pieces_.push_back(Piece{std::move(literal), index});
    literal.clear();
    i = end;
  }
  pieces_.push_back(Piece{std::move(literal), -1});
}

int CommandTemplate::index_of(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

std::string CommandTemplate::fill(const std::vector<double>& values) const {
  if (values.size() != names_.size()) {
    throw std::invalid_argument(fmt::format("{}: {} values given for the {} names {}", owner_,
                                            values.size(), names_.size(), quoted_list(names_)));
  }
  std::string out;
  for (const Piece& p : pieces_) {
    out += p.literal;
    if (p.name >= 0) out += python_float_repr(values[static_cast<size_t>(p.name)]);
  }
  return out;
}

int run_shell_command(const std::string& command) {
  // What is already buffered is printed before the command's own output.
  std::fflush(stdout);
  std::fflush(stderr);
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv), environ) !=
      0) {
    return 127;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return 127;
}

}  // namespace trainpack
