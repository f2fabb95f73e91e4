// The include arrows of docs/architecture.md ("Layers"): every `#include "trainpack/..."` of
// include/ and src/ goes to the includer's layer or one below it, but for the upward references
// that page lists. A file that is in no layer below fails the test: add it to the table here and
// to the diagram there.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace layers_test {

namespace fs = std::filesystem;

enum Layer { kUtils, kVocabulary, kCallbacks, kMonitors, kCoreLoop, kInput, kTrainers };
constexpr int kNotLayered = -1;  // detail/ (internals, see detail/README.md) and the umbrellas
constexpr int kUnknown = -2;

const char* layer_name(int layer) {
  static const char* const names[] = {"utils",     "vocabulary", "callbacks", "monitors",
                                      "core loop", "input",      "trainers"};
  return layer >= 0 ? names[layer] : "?";
}

// `rel`: a path under include/trainpack/ or src/, without its extension ("train/trainer").
int layer_of(const std::string& rel) {
  static const std::map<std::string, int> named = {
      {"train/step_context", kVocabulary},
      {"exceptions", kVocabulary},
      {"graph", kVocabulary},
      {"train/tower_registry", kVocabulary},
      {"train/distributed", kVocabulary},
      {"train/distributed_env", kVocabulary},  // src: DistributedEnv
      {"train/process_group", kVocabulary},    // src: ProcessGroup
      {"core/step_counter", kCallbacks},       // MaintainStepCounter, included by callbacks/steps.h
      {"callbacks/monitor_base", kMonitors},
      {"callbacks/monitor", kMonitors},
      {"callbacks/json_writer", kMonitors},
      {"callbacks/tf_event_writer", kMonitors},
      {"callbacks/scalar_printer", kMonitors},
      {"callbacks/send_monitor_data", kMonitors},
      {"callbacks/tracking_monitor", kMonitors},
      {"callbacks/comet_ml_monitor", kMonitors},
      {"callbacks/mlflow_monitor", kMonitors},
      {"train/trainer", kCoreLoop},
      {"session_init", kCoreLoop},
      {"train/state", kCoreLoop},
      {"train/optimizer_state", kCoreLoop},
      {"train/resume_point", kCoreLoop},
      {"train/defaults", kCoreLoop},
      {"train/signals", kCoreLoop},  // src: detail/signals.h, the main loop's signal scope
      {"train/single_cost", kTrainers},
      {"train/cuda_graph", kTrainers},
      {"train/gradproc", kTrainers},
      {"train/precision", kTrainers},
      {"train/loss_scaler", kTrainers},
      {"train/data_parallel", kTrainers},
      {"train/config", kTrainers},
      {"train/tower", kTrainers},
      {"trainpack", kNotLayered},
      {"testing", kNotLayered},
  };
  if (auto it = named.find(rel); it != named.end()) return it->second;
  auto under = [&rel](const char* dir) { return rel.rfind(dir, 0) == 0; };
  if (under("utils/")) return kUtils;
  if (under("detail/")) return kNotLayered;
  if (under("callbacks/")) return kCallbacks;
  if (under("input/")) return kInput;
  return kUnknown;
}

// The upward includes docs/architecture.md names: (includer, included), both as layer_of takes
// them; an includer ending in '/' stands for every source file under that folder.
bool listed_upward(bool header, const std::string& from, const std::string& to) {
  if (header) return from == "callbacks/inference_runner" && to == "input/dataflow";
  if (from.rfind("callbacks/", 0) == 0 &&
      (to == "train/trainer" || to == "callbacks/monitor_base")) {
    return true;
  }
  static const std::set<std::pair<std::string, std::string>> sources = {
      {"train/step_context", "train/trainer"},
      {"core/step_counter", "train/trainer"},
      {"callbacks/saver", "train/state"},
      {"callbacks/inference_runner", "train/single_cost"},
  };
  return sources.count({from, to}) > 0;
}

std::string without_extension(const std::string& rel) { return rel.substr(0, rel.rfind('.')); }

struct Include {
  std::string from;  // without extension
  std::string to;    // without extension
  bool header;
};

std::vector<Include> all_includes(const fs::path& root, const std::string& extension, bool header) {
  std::vector<Include> out;
  const std::regex include_re(R"re(#include "trainpack/([^"]+)\.h")re");
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || entry.path().extension() != extension) continue;
    std::ifstream in(entry.path());
    const std::string text(std::istreambuf_iterator<char>(in), {});
    const std::string from = without_extension(fs::relative(entry.path(), root).generic_string());
    for (std::sregex_iterator it(text.begin(), text.end(), include_re), end; it != end; ++it) {
      out.push_back({from, (*it)[1].str(), header});
    }
  }
  return out;
}

std::vector<Include> repository_includes() {
  const fs::path include_dir = TRAINPACK_INCLUDE_DIR;
  std::vector<Include> all = all_includes(include_dir / "trainpack", ".h", /*header=*/true);
  std::vector<Include> sources =
      all_includes(include_dir.parent_path() / "src", ".cpp", /*header=*/false);
  all.insert(all.end(), sources.begin(), sources.end());
  return all;
}

TEST(Layers, EveryIncludePointsDownButTheListedOnes) {
  const std::vector<Include> includes = repository_includes();
  ASSERT_GT(includes.size(), 200u);
  for (const auto& inc : includes) {
    const int from = layer_of(inc.from);
    const int to = layer_of(inc.to);
    EXPECT_NE(from, kUnknown) << inc.from << " is in no layer of tests/layers_test.cpp";
    EXPECT_NE(to, kUnknown) << inc.to << " is in no layer of tests/layers_test.cpp";
    if (from < 0 || to < 0 || to <= from) continue;
    EXPECT_TRUE(listed_upward(inc.header, inc.from, inc.to))
        << (inc.header ? "include/trainpack/" : "src/") << inc.from << " (" << layer_name(from)
        << ") includes trainpack/" << inc.to << ".h (" << layer_name(to)
        << "), an upward reference docs/architecture.md does not list";
  }
}

TEST(Layers, TheCoreLoopIncludesNoTrainerKindAndInputOnlyTheLoopAndTheRegistry) {
  int core = 0;
  int input = 0;
  for (const auto& inc : repository_includes()) {
    if (layer_of(inc.from) == kCoreLoop) {
      ++core;
      EXPECT_NE(layer_of(inc.to), kTrainers) << inc.from << " includes " << inc.to;
    }
    if (inc.from.rfind("input/", 0) == 0) {
      ++input;
      if (inc.to.rfind("train/", 0) == 0) {
        EXPECT_TRUE(inc.to == "train/trainer" || inc.to == "train/tower_registry")
            << inc.from << " includes " << inc.to;
      }
    }
  }
  EXPECT_GT(core, 10);
  EXPECT_GT(input, 5);
}

// The table itself: the exceptions are upward (so that a list that allowed everything fails).
TEST(Layers, TheListedExceptionsAreUpward) {
  EXPECT_GT(layer_of("input/dataflow"), layer_of("callbacks/inference_runner"));
  EXPECT_GT(layer_of("train/trainer"), layer_of("callbacks/base"));
  EXPECT_GT(layer_of("train/single_cost"), layer_of("callbacks/inference_runner"));
  EXPECT_FALSE(listed_upward(/*header=*/true, "train/trainer", "train/single_cost"));
  EXPECT_FALSE(listed_upward(/*header=*/false, "train/trainer", "train/single_cost"));
  EXPECT_FALSE(listed_upward(/*header=*/false, "input/input_source", "train/tower"));
}

}  // namespace layers_test
