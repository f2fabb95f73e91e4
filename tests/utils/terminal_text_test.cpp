// terminal_safe (utils/terminal_text.h): what a terminal acts on is escaped, the rest (UTF-8
// included) kept; and the messages of SaverRestore and DictRestore, which quote a checkpoint's
// entry names and paths, go through it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "trainpack/core/session_init.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/terminal_text.h"

namespace trainpack {
namespace terminal_text_test {

using testing::LogCapture;

// Whether `text` holds a byte that a terminal acts on (what terminal_safe escapes, '\n' included),
// other than a tab.
bool has_control(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return true;
    // A C1 control: a byte 0x80-0x9f alone (not inside a multi-byte character), or U+0080-U+009F.
    const auto before = i == 0 ? 0 : static_cast<unsigned char>(text[i - 1]);
    if (c >= 0x80 && c <= 0x9f && (before < 0x80 || before == 0xc2)) return true;
  }
  return false;
}

TEST(TerminalSafe, EscapesWhatATerminalActsOnAndKeepsTheRest) {
  const std::map<std::string, std::string> cases = {
      {"plain text, 1.5 & 'quotes' \\ too", "plain text, 1.5 & 'quotes' \\ too"},
      {"tab\tand\nline", "tab\tand\nline"},
      {"\x1b]52;c;cHduZWQ=\x07", "\\x1b]52;c;cHduZWQ=\\x07"},  // OSC 52: a clipboard write
      {"\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"},
      {std::string("nul\0end", 7), "nul\\x00end"},
      {"cr\rdel\x7f", "cr\\x0ddel\\x7f"},
      {std::string("\xc2\x9b") + "31m", "\\xc2\\x9b31m"},  // U+009B, CSI as a C1 control
      {std::string("\x9b") + "31m", "\\x9b31m"},           // CSI as one byte (not UTF-8)
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82 \xc2\xa0",
       "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82 \xc2\xa0"},
      {"\xc3", "\\xc3"},                             // cut short
      {"\xc0\xaf", "\\xc0\\xaf"},                    // overlong '/'
      {"\xed\xa0\x80", "\\xed\\xa0\\x80"},           // a surrogate
      {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // above U+10FFFF
      {"\xe2\x82", "\\xe2\\x82"},
  };
  for (const auto& [text, safe] : cases) {
    EXPECT_EQ(terminal_safe(text), safe) << safe;
    EXPECT_FALSE(has_control(terminal_safe(text, LineFeeds::kEscape))) << safe;
  }
  EXPECT_EQ(terminal_safe("a\nb", LineFeeds::kEscape), "a\\x0ab");
  EXPECT_EQ(terminal_safe(""), "");
}

class RestoreMessages : public testing::TempDirTest {};

// A checkpoint's entry names and path are the writer's choice: SaverRestore's and DictRestore's
// own messages quote them escaped, on one line.
TEST_F(RestoreMessages, QuoteEntryNamesAndPathsEscaped) {
  const std::string name = "w\x1b]52;c;cHduZWQ=\x07\nWRN forged";
  const TensorMap tensors = {{name, torch::full({2}, std::numeric_limits<float>::quiet_NaN())}};
  const auto quoted_lines = [](const LogCapture& log) {
    std::vector<std::string> out;
    for (const auto& line : log.lines()) {
      if (line.find("Variables to restore from dict") != std::string::npos ||
          line.find("Restoring checkpoint from") != std::string::npos ||
          line.find("holds weights that are not finite") != std::string::npos) {
        out.push_back(line);
      }
    }
    return out;
  };
  {
    LogCapture log;
    NoOpTrainer trainer;
    try {
      DictRestore(tensors, SaverRestoreOptions().partial(true)).run_init(trainer);
    } catch (const std::exception&) {
      // The restore itself may refuse a dict that matches nothing; its messages are not these.
    }
    const std::vector<std::string> lines = quoted_lines(log);
    ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(log.lines());
    for (const auto& line : lines) {
      EXPECT_FALSE(has_control(line)) << line;
      EXPECT_NE(line.find("w\\x1b]52;c;cHduZWQ=\\x07\\x0aWRN forged"), std::string::npos) << line;
    }
  }
  {
    const std::filesystem::path run = dir() / "run\x1b]0;title\x07";
    std::filesystem::create_directories(run);
    const std::string prefix = (run / "model-0").string();
    write_checkpoint(prefix, tensors, CheckpointWriteOptions().fsync(false));
    LogCapture log;
    NoOpTrainer trainer;
    try {
      SaverRestore(prefix, SaverRestoreOptions().partial(true)).run_init(trainer);
    } catch (const std::exception&) {
    }
    const std::vector<std::string> lines = quoted_lines(log);
    ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(log.lines());
    for (const auto& line : lines) {
      EXPECT_FALSE(has_control(line)) << line;
      EXPECT_NE(line.find("run\\x1b]0;title\\x07/model-0"), std::string::npos) << line;
    }
    EXPECT_NE(lines[1].find("w\\x1b]52;c;cHduZWQ=\\x07\\x0aWRN forged"), std::string::npos);
  }
}

}  // namespace terminal_text_test
}  // namespace trainpack
