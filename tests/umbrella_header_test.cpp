// trainpack/trainpack.h includes every public header (all of include/trainpack but detail/ and
// testing.h), so that a header added later cannot be forgotten there.
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
    ++checked;
    EXPECT_NE(umbrella.find("#include \"" + rel + "\""), std::string::npos)
        << rel << " is a public header that trainpack/trainpack.h does not include";
  }
  EXPECT_GT(checked, 40);
}

}  // namespace umbrella_header_test
