// trainpack/trainpack.h includes every public header (all of include/trainpack but detail/,
// testing.h and the forwarding headers left at the paths that moved to core/), so that a header
// added later cannot be forgotten there; it includes no forwarding header (whose note would then
// be printed for every user of the umbrella).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "trainpack/trainpack.h"

namespace umbrella_header_test {

namespace fs = std::filesystem;

TEST(UmbrellaHeader, IncludesEveryPublicHeader) {
  const fs::path include_dir = TRAINPACK_INCLUDE_DIR;
  std::ifstream in(include_dir / "trainpack" / "trainpack.h");
  ASSERT_TRUE(in) << "cannot read trainpack.h under " << include_dir;
  const std::string umbrella(std::istreambuf_iterator<char>(in), {});
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(include_dir / "trainpack")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".h") continue;
    const std::string rel = fs::relative(entry.path(), include_dir).generic_string();
    if (rel.rfind("trainpack/detail/", 0) == 0 || rel == "trainpack/testing.h" ||
        rel == "trainpack/trainpack.h") {
      continue;
    }
    std::ifstream header(entry.path());
    const std::string text(std::istreambuf_iterator<char>(header), {});
    if (text.find("// trainpack-moved-header") != std::string::npos) {
      EXPECT_EQ(umbrella.find("#include \"" + rel + "\""), std::string::npos)
          << "trainpack/trainpack.h includes " << rel << ", a forwarding header";
      continue;
    }
    ++checked;
    EXPECT_NE(umbrella.find("#include \"" + rel + "\""), std::string::npos)
        << rel << " is a public header that trainpack/trainpack.h does not include";
  }
  EXPECT_GT(checked, 40);
}

}  // namespace umbrella_header_test
