// Test support: a fresh directory per test, and the fixture that gives every test one.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>

#include "trainpack/utils/logger.h"

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

// A directory made by make_temp_dir, removed with everything in it when this goes out of scope.
// Its owner's permissions are given back first: tests make it read-only to provoke errors.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& prefix) : path_(make_temp_dir(prefix)) {}
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A fixture whose every test gets a fresh, empty directory, `dir()`, named after the test suite.
// After the test, the logger directory is unset (a test may have set one, whose log.log would
// stay open) and the directory is removed. `Base` is the fixture it extends (::testing::Test,
// ::testing::TestWithParam<P> or a test file's own).
template <class Base = ::testing::Test>
class TempDirFixture : public Base {
 protected:
  void SetUp() override {
    Base::SetUp();
    std::string prefix = ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name();
    std::replace(prefix.begin(), prefix.end(), '/', '_');  // parameterised suites: "Inst/Suite"
    dir_.emplace(prefix);
  }
  void TearDown() override {
    logger::unset_logger_dir();
    dir_.reset();
    Base::TearDown();
  }

  const std::filesystem::path& dir() const { return dir_->path(); }
  // The path of `name` in dir() (nothing is created).
  std::filesystem::path path(const std::string& name) const { return dir() / name; }

 private:
  std::optional<ScopedTempDir> dir_;
};

using TempDirTest = TempDirFixture<::testing::Test>;

}  // namespace testing
}  // namespace trainpack
