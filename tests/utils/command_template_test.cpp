// CommandTemplate (the `{stat}` commands of SendStat / SendMonitorData), run_shell_command, and
// the Python float repr that fills the placeholders.
#include "trainpack/utils/command_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainpack/utils/float_repr.h"

namespace trainpack {
namespace command_template_test {

using ::testing::HasSubstr;

TEST(CommandTemplate, FloatReprIsPythonRepr) {
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(100.0), "100.0");
  EXPECT_EQ(python_float_repr(-2.5), "-2.5");
  EXPECT_EQ(python_float_repr(0.0), "0.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1e-05), "1e-05");
  EXPECT_EQ(python_float_repr(1.5e-07), "1.5e-07");
  EXPECT_EQ(python_float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1.2345e20), "1.2345e+20");
  EXPECT_EQ(python_float_repr(1e-300), "1e-300");
  EXPECT_EQ(python_float_repr(0.6931471824645996), "0.6931471824645996");
  EXPECT_EQ(python_float_repr(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(python_float_repr(123.456), "123.456");
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(python_float_repr(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(python_float_repr(std::nan("")), "nan");
}

TEST(CommandTemplate, FillsPlaceholdersWithNumbers) {
  CommandTemplate t("SendStat", "echo {cost} {Throughput (steps/sec)} {val/acc} {cost}",
                    {"cost", "Throughput (steps/sec)", "val/acc"});
  EXPECT_EQ(t.fill({0.1, 12.5, 1.0}), "echo 0.1 12.5 1.0 0.1");
  EXPECT_EQ(t.names(), (std::vector<std::string>{"cost", "Throughput (steps/sec)", "val/acc"}));
  EXPECT_EQ(t.index_of("val/acc"), 2);
  EXPECT_EQ(t.index_of("nope"), -1);
}

TEST(CommandTemplate, DoubledBracesAreLiteral) {
  CommandTemplate t("SendStat", "awk '{{print $1}}' <<< {x}; echo }}{{", {"x"});
  EXPECT_EQ(t.fill({2.0}), "awk '{print $1}' <<< 2.0; echo }{");
}

TEST(CommandTemplate, DuplicateAndUnusedNamesAreFine) {
  CommandTemplate t("SendStat", "true {a}", {"a", "b", "a"});
  EXPECT_EQ(t.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.fill({1, 2}), "true 1.0");
  EXPECT_THROW(t.fill({1}), std::invalid_argument);
}

std::string construction_error(const std::string& command, std::vector<std::string> names) {
  try {
    CommandTemplate("SendMonitorData", command, std::move(names));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CommandTemplate, UnknownPlaceholderNamesClassTemplateAndPlaceholder) {
  const std::string e = construction_error("echo {cost} {acc}", {"cost"});
  EXPECT_THAT(e, HasSubstr("SendMonitorData"));
  EXPECT_THAT(e, HasSubstr("unknown placeholder '{acc}'"));
  EXPECT_THAT(e, HasSubstr("'echo {cost} {acc}'"));
  EXPECT_THAT(e, HasSubstr("'cost'"));
  // A format spec is not supported: the whole text is the (unknown) name.
  EXPECT_THAT(construction_error("echo {cost:.3f}", {"cost"}),
              HasSubstr("unknown placeholder '{cost:.3f}'"));
}

TEST(CommandTemplate, UnbalancedBracesAreErrors) {
  EXPECT_THAT(construction_error("echo {cost", {"cost"}),
              HasSubstr("'{' at position 5 is never closed"));
  EXPECT_THAT(construction_error("echo cost}", {"cost"}), HasSubstr("single '}' at position 9"));
  EXPECT_THAT(construction_error("echo {a{b}}", {"a", "b"}),
              HasSubstr("'{' at position 7 inside the placeholder that starts at position 5"));
  EXPECT_THAT(construction_error("echo {}", {"cost"}), HasSubstr("empty placeholder '{}'"));
  EXPECT_THAT(construction_error("echo {cost", {"cost"}),
              HasSubstr("in the command template 'echo {cost'"));
}

TEST(CommandTemplate, RunShellCommandReturnsTheExitStatus) {
  EXPECT_EQ(run_shell_command("true"), 0);
  EXPECT_EQ(run_shell_command("exit 3"), 3);
  EXPECT_EQ(run_shell_command("kill -TERM $$"), -15);
  EXPECT_EQ(run_shell_command("/nonexistent/command 2>/dev/null"), 127);
}

}  // namespace command_template_test
}  // namespace trainpack
