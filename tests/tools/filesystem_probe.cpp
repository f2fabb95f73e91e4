// A program linked to LibTorch alone, the way a user's program is linked without trainpack's
// link options: libtorch's libraries come before libstdc++ in its list of libraries. It prints
// which shared object answers its calls to std::filesystem::remove_all ("remove_all: <file>"),
// then creates and removes a small tree under the directory given as argument.
// tests/utils/libstdcxx_first_test.cpp runs it to show that the hazard it guards against is real
// on the LibTorch at hand (PyTorch's pip wheels export the std::filesystem functions of the
// libstdc++ they were built with).
#include <dlfcn.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: trainpack_filesystem_probe DIR\n";
    return 2;
  }
  const auto remove_all = static_cast<std::uintmax_t (*)(const fs::path&)>(&fs::remove_all);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(remove_all), &info) == 0 || info.dli_fname == nullptr) {
    std::cerr << "dladdr found no object for std::filesystem::remove_all\n";
    return 1;
  }
  std::cout << "remove_all: " << info.dli_fname << std::endl;
  const fs::path tree = fs::path(argv[1]) / "probe" / "a" / "b";
  fs::create_directories(tree);
  std::ofstream(tree / "file") << "x";
  std::cout << "removed: " << remove_all(fs::path(argv[1]) / "probe") << std::endl;
  return 0;
}
