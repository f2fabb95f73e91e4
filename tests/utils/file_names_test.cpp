// The rule for file names made from user strings (MinSaver, DumpTensorAsImage).
#include "trainpack/utils/file_names.h"

#include <gtest/gtest.h>

#include <string>

namespace trainpack {
namespace file_names_test {

TEST(SafeFileNameComponentTest, KeepsAnOrdinaryName) {
  EXPECT_EQ(safe_file_name_component("val-error-top1"), "val-error-top1");
  EXPECT_EQ(safe_file_name_component("größe 1"), "größe 1");
  EXPECT_EQ(file_name_problem("val-error-top1"), std::nullopt);
}

TEST(SafeFileNameComponentTest, PathSeparatorsAndControlCharactersBecomeUnderscores) {
  EXPECT_EQ(safe_file_name_component("a/b\\c"), "a_b_c");
  EXPECT_EQ(safe_file_name_component(std::string("a\0b\nc\x7f", 6)), "a_b_c_");
  EXPECT_EQ(safe_file_name_component("../../etc/passwd"), "_._.._etc_passwd");
  EXPECT_EQ(file_name_problem("a/b"), "it contains '/'");
  EXPECT_EQ(file_name_problem("a\nb"), "it contains the control character \\x0a");
}

TEST(SafeFileNameComponentTest, NoHiddenFileNoDotOrDotDotNoEmptyName) {
  EXPECT_EQ(safe_file_name_component(".hidden"), "_hidden");
  EXPECT_EQ(safe_file_name_component("."), "_");
  EXPECT_EQ(safe_file_name_component(".."), "_.");
  EXPECT_EQ(safe_file_name_component(""), "_");
  EXPECT_EQ(file_name_problem(".."), "it starts with '.' (a hidden file, '.' or '..')");
  EXPECT_EQ(file_name_problem(""), "it is empty");
}

TEST(SafeFileNameComponentTest, TrainpacksOwnNamesGetAPrefix) {
  for (const char* own : {"checkpoint", "checkpoint.previous", "stats.json", "stats.json.tmp",
                          "log.log", "hyper.txt", "model-12", "model-12.data", "model-0.index",
                          "events.out.tfevents.123.host", "x.tmp", "run.lock"}) {
    SCOPED_TRACE(own);
    EXPECT_TRUE(is_reserved_file_name(own));
    EXPECT_EQ(safe_file_name_component(own), std::string("_") + own);
    EXPECT_NE(file_name_problem(own), std::nullopt);
  }
  for (const char* other :
       {"checkpoints", "model-", "model-x", "model-12b", "min-val-error", "stats", "hyper.txt2"}) {
    SCOPED_TRACE(other);
    EXPECT_FALSE(is_reserved_file_name(other));
    EXPECT_EQ(safe_file_name_component(other), other);
  }
}

TEST(SafeFileNameComponentTest, ALongNameIsCutWithAHashThatKeepsNamesApart) {
  const std::string a = std::string(300, 'a') + "1";
  const std::string b = std::string(300, 'a') + "2";
  const std::string sa = safe_file_name_component(a);
  EXPECT_EQ(sa.size(), kMaxFileNameComponent);
  EXPECT_EQ(sa.substr(0, 100), std::string(100, 'a'));
  EXPECT_NE(sa, safe_file_name_component(b));
  EXPECT_EQ(sa, safe_file_name_component(a));  // the same on every call (and run)
  EXPECT_EQ(file_name_problem(a), "it is 301 bytes long, more than 128");
  // Never cut inside a UTF-8 character: "é" is two bytes.
  std::string e;
  for (int i = 0; i < 100; ++i) e += "\xc3\xa9";
  const std::string se = safe_file_name_component(e);
  EXPECT_LE(se.size(), kMaxFileNameComponent);
  const size_t dash = se.rfind('-');
  ASSERT_NE(dash, std::string::npos);
  EXPECT_EQ(dash % 2, 0u);  // whole characters before the hash
}

TEST(SafeFileNameComponentTest, IsIdempotentAndAgreesWithFileNameProblem) {
  for (const std::string& s :
       {std::string("ok"), std::string("a/b"), std::string(".x"), std::string("model-3"),
        std::string(200, 'z'), std::string("events.out.tfevents") + std::string(200, 'e'),
        std::string("\x01\x02"), std::string()}) {
    const std::string safe = safe_file_name_component(s);
    EXPECT_EQ(safe_file_name_component(safe), safe) << s;
    EXPECT_EQ(file_name_problem(safe), std::nullopt) << s;
    EXPECT_EQ(file_name_problem(s) == std::nullopt, safe == s) << s;
  }
}

}  // namespace file_names_test
}  // namespace trainpack
