// Where a callback writes (utils/output_dir.h): the given directory, else the logger directory,
// else one error message naming the class and the fix.
#include "trainpack/utils/output_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "support/errors.h"
#include "support/temp_dir.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace output_dir_test {

namespace fs = std::filesystem;
using testing::message_of;

class OutputDirTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    logger::unset_logger_dir();
  }
};

TEST_F(OutputDirTest, TheGivenDirectoryWinsEvenWhenEmpty) {
  logger::set_logger_dir((dir() / "log").string(), 'k');
  EXPECT_EQ(output_dir_or_logger_dir(std::string("/x/y")), "/x/y");
  EXPECT_EQ(output_dir_or_logger_dir(std::string()), "");
  EXPECT_EQ(resolve_output_dir(std::string("rel"), "C", "COptions().dir(dir)"), "rel");
}

TEST_F(OutputDirTest, ElseTheLoggerDirectory) {
  logger::set_logger_dir((dir() / "log").string(), 'k');
  EXPECT_EQ(output_dir_or_logger_dir(std::nullopt), (dir() / "log").string());
  EXPECT_EQ(resolve_output_dir(std::nullopt, "C", "COptions().dir(dir)"), (dir() / "log").string());
}

TEST_F(OutputDirTest, ElseOneMessageNamingTheClassAndTheFix) {
  EXPECT_EQ(output_dir_or_logger_dir(std::nullopt), std::nullopt);
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              resolve_output_dir(std::nullopt, "DumpTensors", "DumpTensorsOptions().dir(dir)");
            }),
            "DumpTensors: no directory was given and the logger directory is not set; pass one "
            "with DumpTensorsOptions().dir(dir), or call trainpack::logger::set_logger_dir(dir) "
            "first");
  // A class that writes only into the logger directory.
  EXPECT_EQ(
      message_of<std::invalid_argument>([] { resolve_output_dir(std::nullopt, "JSONWriter", ""); }),
      "JSONWriter: the logger directory is not set; call "
      "trainpack::logger::set_logger_dir(dir) first");
}

}  // namespace output_dir_test
}  // namespace trainpack
