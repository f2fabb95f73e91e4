// Test support: the message of the exception a callable throws.
#pragma once

#include <exception>
#include <string>

namespace trainpack {
namespace testing {

// Calls `f` and returns what() of the `E` it throws, or "<no exception>".
template <typename E = std::exception, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception>";
}

}  // namespace testing
}  // namespace trainpack
