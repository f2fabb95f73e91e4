// The layers of docs/architecture.md ("Layers"), read from the folders, bottom up: utils < core <
// input < callbacks < train. Every `#include "trainpack/..."` of include/ and src/ goes to the
// includer's folder or one below it, but for the one upward reference that page lists. detail/,
// trainpack.h and testing.h are in no layer; nor are the forwarding headers left at the paths that
// moved to core/ (marked `// trainpack-moved-header`), which no file of the project may include.
// Any other file must be in one of the five folders (a new top-level header fails the test).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
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

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string without_extension(const std::string& rel) { return rel.substr(0, rel.rfind('.')); }

fs::path headers_dir() { return fs::path(TRAINPACK_INCLUDE_DIR) / "trainpack"; }
fs::path sources_dir() { return fs::path(TRAINPACK_INCLUDE_DIR).parent_path() / "src"; }

// The forwarding headers, as paths under include/trainpack/ without extension ("train/trainer").
const std::set<std::string>& forwarding_headers() {
  static const std::set<std::string> headers = [] {
    std::set<std::string> out;
    for (const auto& entry : fs::recursive_directory_iterator(headers_dir())) {
      if (!entry.is_regular_file() || entry.path().extension() != ".h") continue;
      if (read_text(entry.path()).find("// trainpack-moved-header") != std::string::npos) {
        out.insert(without_extension(fs::relative(entry.path(), headers_dir()).generic_string()));
      }
    }
    return out;
  }();
  return headers;
}

// `rel`: a path under include/trainpack/ (`header`) or src/, without its extension
// ("core/trainer").
int layer_of(const std::string& rel, bool header) {
  if (header && forwarding_headers().count(rel) > 0) return kNotLayered;
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
    const std::string text = read_text(root / rel);
    const std::string from = without_extension(rel);
    for (std::sregex_iterator it(text.begin(), text.end(), include_re), end; it != end; ++it) {
      out.push_back({from, (*it)[1].str(), header});
    }
  }
  return out;
}

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
    const int from = layer_of(inc.from, inc.header);
    const int to = layer_of(inc.to, /*header=*/true);
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
      EXPECT_NE(layer_of(without_extension(rel), extension == ".h"), kUnknown)
          << root.filename().generic_string() << "/" << rel
          << " is in no layer: put it in one of utils/, core/, input/, callbacks/, train/";
    }
  }
  EXPECT_GT(files, 150);
}

// The rule itself: the exception is upward (so that a rule that allowed everything fails), and
// nothing else is allowed.
TEST(Layers, TheOneExceptionIsUpward) {
  EXPECT_GT(layer_of("train/single_cost", true), layer_of("callbacks/inference_runner", false));
  EXPECT_FALSE(listed_upward(/*header=*/true, "callbacks/inference_runner", "train/single_cost"));
  EXPECT_FALSE(listed_upward(/*header=*/false, "core/trainer", "train/single_cost"));
  EXPECT_FALSE(listed_upward(/*header=*/false, "input/input_source", "callbacks/saver"));
  EXPECT_EQ(layer_of("a_new_top_level_header", /*header=*/true), kUnknown);
  EXPECT_EQ(layer_of("detail/signals", /*header=*/true), kNotLayered);
}

// The forwarding headers are for users' code only: the project includes the new paths (so that
// its own build prints no note). tests/compat/ includes the old paths on purpose.
TEST(Layers, NothingOfTheProjectIncludesAMovedPath) {
  if (forwarding_headers().empty()) GTEST_SKIP() << "no forwarding header is left";
  const fs::path root = fs::path(TRAINPACK_INCLUDE_DIR).parent_path();
  const std::regex include_re(R"re(#include\s*[<"]trainpack/([^">]+)\.h[">])re");
  int files = 0;
  for (const char* dir : {"include", "src", "tests", "examples", "bench"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cc")) continue;
      const std::string rel = fs::relative(entry.path(), root).generic_string();
      if (rel.rfind("tests/compat/", 0) == 0) continue;
      ++files;
      const std::string text = read_text(entry.path());
      for (std::sregex_iterator it(text.begin(), text.end(), include_re), end; it != end; ++it) {
        EXPECT_EQ(forwarding_headers().count((*it)[1].str()), 0u)
            << rel << " includes trainpack/" << (*it)[1].str() << ".h, a path that moved to core/";
      }
    }
  }
  EXPECT_GT(files, 300);
}

}  // namespace layers_test
