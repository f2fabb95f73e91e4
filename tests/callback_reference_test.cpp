// docs/callback-reference.md is an index of the headers: every public class that a header under
// include/trainpack/callbacks/ derives (callbacks, monitors, inferencers), and every class of
// include/trainpack/core/ derived from Callback, ProxyCallback or MonitorBase, is named there, its
// header is linked, and every header link points at a file that exists and is not one of the
// forwarding headers left at the paths that moved to core/. The contract itself is the header
// comment, so this checks only that the index is complete and its links are right.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

namespace callback_reference_test {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `text` without the bodies of `namespace detail { ... }  // namespace detail` (internals).
std::string without_detail(std::string text) {
  const std::string open = "namespace detail {";
  const std::string close = "}  // namespace detail";
  for (size_t at; (at = text.find(open)) != std::string::npos;) {
    const size_t end = text.find(close, at);
    if (end == std::string::npos) break;
    text.erase(at, end + close.size() - at);
  }
  return text;
}

TEST(CallbackReference, NamesEveryPublicClassAndLinksItsHeader) {
  const fs::path include_dir = TRAINPACK_INCLUDE_DIR;
  const std::string reference =
      read_text(include_dir.parent_path() / "docs" / "callback-reference.md");
  ASSERT_FALSE(reference.empty());
  const std::regex class_re(R"re(\nclass (\w+)(?: final)? : public (\w+))re");
  const std::regex callback_base_re("Callback|ProxyCallback|MonitorBase");
  int classes = 0;
  for (const char* folder_name : {"callbacks", "core"}) {
    const std::string folder = folder_name;
    for (const auto& entry : fs::directory_iterator(include_dir / "trainpack" / folder)) {
      if (entry.path().extension() != ".h") continue;
      const std::string full_text = read_text(entry.path());
      if (full_text.find("// trainpack-moved-header") != std::string::npos) continue;
      const std::string text = without_detail(full_text);
      const std::string header = "trainpack/" + folder + "/" + entry.path().filename().string();
      bool any = false;
      for (std::sregex_iterator it(text.begin(), text.end(), class_re), end; it != end; ++it) {
        // core/ also holds the loop, its exceptions and session initialisers: not callbacks.
        if (folder == "core" && !std::regex_match((*it)[2].str(), callback_base_re)) continue;
        any = true;
        ++classes;
        const std::string name = (*it)[1].str();
        EXPECT_NE(reference.find("`" + name + "`"), std::string::npos)
            << name << " (" << header << ") is not in docs/callback-reference.md";
      }
      if (any) {
        EXPECT_NE(reference.find("](../include/" + header + ")"), std::string::npos)
            << header << " is not linked from docs/callback-reference.md";
      }
    }
  }
  EXPECT_GT(classes, 40);
}

TEST(CallbackReference, EveryHeaderLinkPointsAtAFile) {
  const fs::path docs = fs::path(TRAINPACK_INCLUDE_DIR).parent_path() / "docs";
  const std::string reference = read_text(docs / "callback-reference.md");
  const std::regex link_re(R"re(\]\((\.\./include/[^)#]+)\))re");
  int links = 0;
  for (std::sregex_iterator it(reference.begin(), reference.end(), link_re), end; it != end; ++it) {
    ++links;
    const fs::path target = docs / (*it)[1].str();
    EXPECT_TRUE(fs::is_regular_file(target)) << (*it)[1].str();
    EXPECT_EQ(read_text(target).find("// trainpack-moved-header"), std::string::npos)
        << (*it)[1].str() << " is a forwarding header: link the header it forwards to";
  }
  EXPECT_GT(links, 15);
}

}  // namespace callback_reference_test
