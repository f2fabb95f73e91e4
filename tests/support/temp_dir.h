// Test support: a fresh directory per test.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace trainpack {
namespace testing {

// Creates `<base>/<prefix>.XXXXXX` with mkdtemp, where <base> is $TRAINPACK_TEST_TMP (ctest sets
// it to the build's tests/tmp) or /tmp. Throws std::runtime_error when it cannot.
inline std::filesystem::path make_temp_dir(const std::string& prefix) {
  const char* env = std::getenv("TRAINPACK_TEST_TMP");
  const std::filesystem::path base =
      env != nullptr && *env != '\0' ? std::filesystem::path(env) : std::filesystem::path("/tmp");
  std::filesystem::create_directories(base);
  std::string tmpl = (base / (prefix + ".XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("make_temp_dir: mkdtemp failed for " + tmpl);
  }
  return tmpl;
}

}  // namespace testing
}  // namespace trainpack
