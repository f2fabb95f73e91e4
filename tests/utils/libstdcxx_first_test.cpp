// Every program linked to trainpack names libstdc++ before LibTorch's libraries (CMakeLists.txt,
// target trainpack's link options), so that its calls to std::filesystem reach the libstdc++ it
// was compiled with. PyTorch's pip wheels (2.5 to 2.15 at least) export strong std::filesystem
// symbols of an older libstdc++; a program that takes them crashed in std::filesystem::path
// handling (its layout differs), in hundreds of this suite's tests.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/command.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace libstdcxx_first_test {

constexpr const char* kRemoveAll = "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE";

// The file of the shared object that holds `address`, or "" when none does.
std::string object_of(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// Whether this process's LibTorch exports std::filesystem::remove_all itself.
bool libtorch_exports_filesystem() {
  void* torch_cpu = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  if (torch_cpu == nullptr) torch_cpu = dlopen("libtorch.so", RTLD_NOW | RTLD_NOLOAD);
  if (torch_cpu == nullptr) return false;
  void* symbol = dlsym(torch_cpu, kRemoveAll);
  const bool exported =
      symbol != nullptr && object_of(symbol).find("libtorch") != std::string::npos;
  dlclose(torch_cpu);
  return exported;
}

TEST(LibstdcxxFirst, StdFilesystemIsAnsweredByTheCompilersLibstdcxx) {
  const auto remove_all = static_cast<std::uintmax_t (*)(const fs::path&)>(&fs::remove_all);
  EXPECT_THAT(object_of(reinterpret_cast<const void*>(remove_all)), HasSubstr("libstdc++.so"));

  trainpack::testing::ScopedTempDir dir("LibstdcxxFirst");
  const fs::path tree = dir.path() / "a" / "b" / "c";
  fs::create_directories(tree);
  std::ofstream(tree / "file") << "x";
  EXPECT_EQ(remove_all(dir.path() / "a"), 4u);
  EXPECT_FALSE(fs::exists(dir.path() / "a"));
}

// The same program linked without trainpack's order takes LibTorch's std::filesystem whenever the
// LibTorch exports one: the check above is what stands between this suite and the crash.
TEST(LibstdcxxFirst, WithoutTheOrderLibTorchsExportWouldAnswer) {
  if (!libtorch_exports_filesystem()) {
    GTEST_SKIP() << "this LibTorch exports no std::filesystem (Debian's are built with the "
                    "system's libstdc++): nothing to take the wrong one from";
  }
  trainpack::testing::ScopedTempDir dir("LibstdcxxFirst");
  const auto [out, status] = trainpack::testing::run_command(
      std::string(TRAINPACK_FILESYSTEM_PROBE) + " " + dir.path().string() + " 2>&1");
  EXPECT_THAT(out, HasSubstr("remove_all: ")) << "status " << status;
  EXPECT_THAT(out, HasSubstr("libtorch")) << "status " << status;
}

}  // namespace libstdcxx_first_test
