// The forwarding headers left at the paths that moved to include/trainpack/core/ (each marked
// `// trainpack-moved-header` on its include line): there are exactly 14; each one includes one
// existing core/ header, which trainpack.h includes; its #pragma message names its own path and
// the new one; it holds nothing but comments, preprocessor lines and blank lines; and
// tests/compat/moved_headers.cpp, which checks that they compile, includes every one of them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace moved_headers_test {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

fs::path repository() { return fs::path(TRAINPACK_INCLUDE_DIR).parent_path(); }

// The forwarding headers, as paths under include/ ("trainpack/train/trainer.h").
std::set<std::string> forwarding_headers() {
  std::set<std::string> out;
  const fs::path include_dir = TRAINPACK_INCLUDE_DIR;
  for (const auto& entry : fs::recursive_directory_iterator(include_dir / "trainpack")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".h") continue;
    if (read_text(entry.path()).find("// trainpack-moved-header") != std::string::npos) {
      out.insert(fs::relative(entry.path(), include_dir).generic_string());
    }
  }
  return out;
}

TEST(MovedHeaders, ThereAreFourteenAndTheCompatProgramIncludesEach) {
  const std::set<std::string> headers = forwarding_headers();
  EXPECT_EQ(headers.size(), 14u);
  const std::string compat = read_text(repository() / "tests" / "compat" / "moved_headers.cpp");
  ASSERT_FALSE(compat.empty());
  for (const std::string& header : headers) {
    EXPECT_NE(compat.find("#include \"" + header + "\""), std::string::npos)
        << "tests/compat/moved_headers.cpp does not include " << header;
  }
}

TEST(MovedHeaders, EachForwardsToACoreHeaderAndSaysWhere) {
  const fs::path include_dir = TRAINPACK_INCLUDE_DIR;
  const std::string umbrella = read_text(include_dir / "trainpack" / "trainpack.h");
  ASSERT_FALSE(umbrella.empty());
  const std::regex include_re(
      R"re(#include "(trainpack/core/\w+\.h)"  // trainpack-moved-header)re");
  for (const std::string& header : forwarding_headers()) {
    SCOPED_TRACE(header);
    const std::string text = read_text(include_dir / header);
    std::smatch match;
    ASSERT_TRUE(std::regex_search(text, match, include_re)) << "no include of a core/ header";
    const std::string target = match[1].str();
    EXPECT_TRUE(fs::is_regular_file(include_dir / target)) << target << " does not exist";
    EXPECT_NE(umbrella.find("#include \"" + target + "\""), std::string::npos)
        << "trainpack.h does not include " << target;
    EXPECT_NE(text.find("#pragma message"), std::string::npos);
    EXPECT_NE(text.find('"' + header + " is deprecated: include " + target + " "),
              std::string::npos)
        << "the #pragma message does not name both paths";

    // Nothing but comments, preprocessor lines (and their continuations) and blank lines; one
    // #include.
    std::istringstream lines(text);
    int includes = 0;
    bool continued = false;
    for (std::string line; std::getline(lines, line);) {
      const bool directive = line.rfind("#", 0) == 0;
      EXPECT_TRUE(continued || directive || line.empty() || line.rfind("//", 0) == 0)
          << "a line that is not a comment or a preprocessor line: " << line;
      if (line.rfind("#include", 0) == 0) ++includes;
      continued = (continued || directive) && !line.empty() && line.back() == '\\';
    }
    EXPECT_EQ(includes, 1);
  }
}

}  // namespace moved_headers_test
