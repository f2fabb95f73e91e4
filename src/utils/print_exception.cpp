#include "trainpack/utils/print_exception.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <ostream>
#include <sstream>
#include <typeinfo>

#include <c10/util/Exception.h>

#include "trainpack/utils/demangle.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace {

// The type the program threw: std::throw_with_nested(T) throws a class of the standard library
// derived from T and std::nested_exception (libstdc++'s std::_Nested_exception<T>, libc++'s
// std::__nested<T>), which is T to the reader.
std::string thrown_type(const std::exception& e) {
  std::string name = type_name(typeid(e));
  for (const char* wrapper : {"std::_Nested_exception<", "std::__1::__nested<", "std::__nested<"}) {
    const std::string prefix = wrapper;
    if (name.rfind(prefix, 0) == 0 && name.back() == '>') {
      name = name.substr(prefix.size(), name.size() - prefix.size() - 1);
      const std::string own = "trainpack::";
      if (name.rfind(own, 0) == 0) name.erase(0, own.size());
      break;
    }
  }
  return name;
}

// A line of LibTorch's backtrace: "frame #12: ..." or the "Exception raised from <function> at
// <file>:<line> (most recent call first):" that heads it.
bool is_backtrace_line(const std::string& line) {
  if (line.rfind("frame #", 0) == 0) {
    size_t i = 7;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
    return i > 7 && i < line.size() && line[i] == ':';
  }
  const std::string head = "Exception raised from ";
  const std::string tail = "(most recent call first):";
  return line.rfind(head, 0) == 0 && line.size() >= tail.size() &&
         line.compare(line.size() - tail.size(), tail.size(), tail) == 0;
}

// `text` without the lines of LibTorch's backtraces, and without trailing blanks and newlines.
std::string without_backtrace_lines(const std::string& text) {
  if (text.find("\nframe #") == std::string::npos &&
      text.find("Exception raised from ") == std::string::npos) {
    return text;
  }
  std::istringstream in(text);
  std::string line, out;
  bool first = true;
  while (std::getline(in, line)) {
    if (is_backtrace_line(line)) continue;
    if (!first) out += '\n';
    out += line;
    first = false;
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// One line of the chain: "(<type>): <message>", without LibTorch's stack traces.
std::string describe_one(const std::exception& e) {
  return "(" + thrown_type(e) + "): " + exception_message(e);
}

// The chain from `e` inwards: one line per cause after `e`'s own.
void describe_nested(const std::exception& e, std::string& out, const c10::Error** innermost) {
  try {
    std::rethrow_if_nested(e);
  } catch (const std::exception& inner) {
    if (const auto* torch_error = dynamic_cast<const c10::Error*>(&inner)) *innermost = torch_error;
    out += "\n  caused by " + describe_one(inner);
    describe_nested(inner, out, innermost);
  } catch (...) {
    out += "\n  caused by: an exception of unknown type";
  }
}

// Whether to show LibTorch's backtrace (TRAINPACK_BACKTRACE=1, or the logger at DEBUG).
bool backtrace_wanted() {
  const char* env = std::getenv(kBacktraceVariable);
  if (env != nullptr && std::strcmp(env, "1") == 0) return true;
  return logger::level() <= logger::Level::kDebug;
}

// The backtrace part of a c10::Error's what(), each line indented.
std::string backtrace_of(const c10::Error& e) {
  std::istringstream in(e.what());
  std::string line, out;
  bool in_trace = false;
  while (std::getline(in, line)) {
    in_trace = in_trace || is_backtrace_line(line);
    if (!in_trace || line.empty()) continue;
    out += "\n    " + line;
  }
  return out;
}

}  // namespace

std::string exception_message(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  return without_backtrace_lines(torch_error != nullptr ? torch_error->what_without_backtrace()
                                                        : std::string(e.what()));
}

std::string describe_exception(const std::exception& e) {
  std::string out = "error " + describe_one(e);
  const c10::Error* innermost = dynamic_cast<const c10::Error*>(&e);
  describe_nested(e, out, &innermost);
  if (innermost != nullptr && backtrace_wanted()) {
    const std::string trace = backtrace_of(*innermost);
    if (!trace.empty()) out += "\n  where LibTorch raised it:" + trace;
  }
  return out;
}

void print_exception(const std::exception& e) { print_exception(e, std::cerr); }

void print_exception(const std::exception& e, std::ostream& out) {
  out << describe_exception(e) << '\n';
  out.flush();
}

}  // namespace trainpack
