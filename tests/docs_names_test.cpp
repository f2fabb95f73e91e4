// Names in the docs that the code can change under them: the default callbacks and monitors that
// docs/trainer.md and docs/callback-reference.md list are the ones train/defaults.h returns, in
// its order; and no page, header or message names a function that does not exist
// (`trainpack::set_logger_dir` is `trainpack::logger::set_logger_dir`).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "trainpack/testing.h"
#include "trainpack/train/defaults.h"

namespace trainpack {
namespace docs_names_test {

namespace fs = std::filesystem;

fs::path repository() { return fs::path(TRAINPACK_INCLUDE_DIR).parent_path(); }

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// "`[A, B, C]`" as the pages write a list of classes. A name is the class a user writes:
// "MergeAllSummaries_RunWithOp" is what MergeAllSummaries() returns, "NoOpMonitor(JSONWriter)"
// what JSONWriter::create() returns without a logger directory.
template <typename Ptr>
std::string listed(const std::vector<Ptr>& list) {
  std::string out = "`[";
  for (const auto& item : list) {
    std::string name = item->name();
    if (name.rfind("NoOpMonitor(", 0) == 0) name = name.substr(12, name.size() - 13);
    name = name.substr(0, name.find('_'));
    out += (out.size() > 2 ? ", " : "") + name;
  }
  return out + "]`";
}

TEST(DocsNames, TheDefaultCallbacksAndMonitorsAreTheOnesTheDocsList) {
  testing::LogCapture log;  // no logger directory: the writers' warnings go here
  const std::string callbacks = listed(DEFAULT_CALLBACKS());
  const std::string monitors = listed(DEFAULT_MONITORS());
  EXPECT_EQ(callbacks, "`[MovingAverageSummary, ProgressBar, MergeAllSummaries, RunUpdateOps]`");
  EXPECT_EQ(monitors, "`[TFEventWriter, JSONWriter, ScalarPrinter]`");
  for (const char* page : {"trainer.md", "callback-reference.md"}) {
    const std::string text = read_text(repository() / "docs" / page);
    ASSERT_FALSE(text.empty()) << page;
    EXPECT_NE(text.find(callbacks), std::string::npos) << page << " does not list " << callbacks;
    EXPECT_NE(text.find(monitors), std::string::npos) << page << " does not list " << monitors;
  }
}

TEST(DocsNames, NothingNamesTrainpackSetLoggerDirOutsideTheLogger) {
  const std::string wrong = "trainpack::set_logger_dir";
  int files = 0;
  for (const char* dir : {"docs", "include", "src", "examples"}) {
    for (const auto& entry : fs::recursive_directory_iterator(repository() / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".md" && ext != ".h" && ext != ".cpp")) continue;
      ++files;
      EXPECT_EQ(read_text(entry.path()).find(wrong), std::string::npos)
          << entry.path() << " names " << wrong << " (it is trainpack::logger::set_logger_dir)";
    }
  }
  const std::string readme = read_text(repository() / "README.md");
  EXPECT_EQ(readme.find(wrong), std::string::npos) << "README.md names " << wrong;
  EXPECT_GT(files, 100);
}

}  // namespace docs_names_test
}  // namespace trainpack
