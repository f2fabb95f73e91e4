#include "trainpack/utils/print_exception.h"

#include <iostream>
#include <ostream>
#include <typeinfo>

#include <c10/util/Exception.h>

#include "trainpack/utils/demangle.h"

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

// One line of the chain: "(<type>): <message>", c10::Error without its stack trace.
std::string describe_one(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  const std::string message =
      torch_error != nullptr ? torch_error->what_without_backtrace() : std::string(e.what());
  return "(" + thrown_type(e) + "): " + message;
}

void describe_nested(const std::exception& e, std::string& out) {
  try {
    std::rethrow_if_nested(e);
  } catch (const std::exception& inner) {
    out += "\n  caused by " + describe_one(inner);
    describe_nested(inner, out);
  } catch (...) {
    out += "\n  caused by: an exception of unknown type";
  }
}

}  // namespace

std::string describe_exception(const std::exception& e) {
  std::string out = "error " + describe_one(e);
  describe_nested(e, out);
  return out;
}

void print_exception(const std::exception& e) { print_exception(e, std::cerr); }

void print_exception(const std::exception& e, std::ostream& out) {
  out << describe_exception(e) << '\n';
  out.flush();
}

}  // namespace trainpack
