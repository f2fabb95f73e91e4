// The layers of docs/architecture.md ("Layers"), read from the folders, bottom up: utils < core <
// input < callbacks < train. Every `#include "trainpack/..."` of include/ and src/ goes to the
// includer's folder or one below it, but for the one upward reference that page lists. detail/,
// trainpack.h and testing.h are in no layer; any other file must be in one of the five folders (a
// new top-level header fails the test).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace layers_test {

namespace fs = std::filesystem;

// The layers, bottom up: a folder's index is its layer.
constexpr const char* kFolders[] = {"utils", "core", "input", "callbacks", "train"};
constexpr int kLayers = sizeof(kFolders) / sizeof(kFolders[0]);
constexpr int kNotLayered = -1;  // detail/ (internals, see detail/README.md) and the umbrellas
constexpr int kUnknown = -2;

const char* layer_name(int layer) { return layer >= 0 ? kFolders[layer] : "?"; }

// `rel`: a path under include/trainpack/ or src/, without its extension ("core/trainer").
int layer_of(const std::string& rel) {
  for (int i = 0; i < kLayers; ++i) {
    if (rel.rfind(std::string(kFolders[i]) + "/", 0) == 0) return i;
  }
  if (rel.rfind("detail/", 0) == 0 || rel == "trainpack" || rel == "testing") return kNotLayered;
  return kUnknown;
}

// The one upward reference: InferenceRunner runs the trainer's tower function, so its source
// needs TowerTrainer (train/single_cost.h), as tensorpack's InferenceRunner does.
bool listed_upward(bool header, const std::string& from, const std::string& to) {
  return !header && from == "callbacks/inference_runner" && to == "train/single_cost";
}

std::string without_extension(const std::string& rel) { return rel.substr(0, rel.rfind('.')); }

struct Include {
  std::string from;  // without extension
  std::string to;    // without extension
  bool header;
};

// Every file under `root` whose extension is `extension`, as a path relative to `root`.
std::vector<std::string> files_under(const fs::path& root, const std::string& extension) {
  std::vector<std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || entry.path().extension() != extension) continue;
    out.push_back(fs::relative(entry.path(), root).generic_string());
  }
  return out;
}

std::vector<Include> all_includes(const fs::path& root, const std::string& extension, bool header) {
  std::vector<Include> out;
  const std::regex include_re(R"re(#include "trainpack/([^"]+)\.h")re");
  for (const std::string& rel : files_under(root, extension)) {
    std::ifstream in(root / rel);
    const std::string text(std::istreambuf_iterator<char>(in), {});
    const std::string from = without_extension(rel);
    for (std::sregex_iterator it(text.begin(), text.end(), include_re), end; it != end; ++it) {
      out.push_back({from, (*it)[1].str(), header});
    }
  }
  return out;
}

fs::path headers_dir() { return fs::path(TRAINPACK_INCLUDE_DIR) / "trainpack"; }
fs::path sources_dir() { return fs::path(TRAINPACK_INCLUDE_DIR).parent_path() / "src"; }

std::vector<Include> repository_includes() {
  std::vector<Include> all = all_includes(headers_dir(), ".h", /*header=*/true);
  std::vector<Include> sources = all_includes(sources_dir(), ".cpp", /*header=*/false);
  all.insert(all.end(), sources.begin(), sources.end());
  return all;
}

TEST(Layers, EveryIncludePointsDownButTheListedOne) {
  const std::vector<Include> includes = repository_includes();
  ASSERT_GT(includes.size(), 200u);
  for (const auto& inc : includes) {
    const int from = layer_of(inc.from);
    const int to = layer_of(inc.to);
    EXPECT_NE(to, kUnknown) << inc.to << " is in no layer of tests/layers_test.cpp";
    if (from < 0 || to < 0 || to <= from) continue;
    EXPECT_TRUE(listed_upward(inc.header, inc.from, inc.to))
        << (inc.header ? "include/trainpack/" : "src/") << inc.from << " (" << layer_name(from)
        << ") includes trainpack/" << inc.to << ".h (" << layer_name(to)
        << "), an upward reference docs/architecture.md does not list";
  }
}

TEST(Layers, EveryFileIsInALayer) {
  int files = 0;
  const std::vector<std::pair<fs::path, std::string>> roots = {{headers_dir(), ".h"},
                                                               {sources_dir(), ".cpp"}};
  for (const auto& [root, extension] : roots) {
    for (const std::string& rel : files_under(root, extension)) {
      ++files;
      EXPECT_NE(layer_of(without_extension(rel)), kUnknown)
          << root.filename().generic_string() << "/" << rel
          << " is in no layer: put it in one of utils/, core/, input/, callbacks/, train/";
    }
  }
  EXPECT_GT(files, 150);
}

// The rule itself: the exception is upward (so that a rule that allowed everything fails), and
// nothing else is allowed.
TEST(Layers, TheOneExceptionIsUpward) {
  EXPECT_GT(layer_of("train/single_cost"), layer_of("callbacks/inference_runner"));
  EXPECT_FALSE(listed_upward(/*header=*/true, "callbacks/inference_runner", "train/single_cost"));
  EXPECT_FALSE(listed_upward(/*header=*/false, "core/trainer", "train/single_cost"));
  EXPECT_FALSE(listed_upward(/*header=*/false, "input/input_source", "callbacks/saver"));
  EXPECT_EQ(layer_of("graph"), kUnknown);
  EXPECT_EQ(layer_of("detail/signals"), kNotLayered);
}

}  // namespace layers_test
