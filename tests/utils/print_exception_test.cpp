// print_exception / describe_exception: the whole chain of nested exceptions, one line each.
#include "trainpack/utils/print_exception.h"

#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "trainpack/core/exceptions.h"
#include "trainpack/testing.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace print_exception_test {

// What catching `throw_it`'s exception and describing it gives.
template <typename F>
std::string described(F&& throw_it) {
  try {
    throw_it();
  } catch (const std::exception& e) {
    return describe_exception(e);
  }
  return "<no exception>";
}

TEST(PrintException, OneExceptionIsOneLineWithItsType) {
  EXPECT_EQ(described([] { throw std::invalid_argument("max_epoch must be >= 0, got -1"); }),
            "error (std::invalid_argument): max_epoch must be >= 0, got -1");
}

TEST(PrintException, EveryNestedCauseFollowsOnALineOfItsOwn) {
  const std::string text = described([] {
    try {
      try {
        throw std::out_of_range("No available data for the key: val-mea");
      } catch (...) {
        std::throw_with_nested(std::runtime_error("MinSaver could not compare"));
      }
    } catch (...) {
      std::throw_with_nested(CallbackError("MinSaver", "trigger", "MinSaver could not compare"));
    }
  });
  EXPECT_EQ(text,
            "error (CallbackError): Callback MinSaver failed in trigger: MinSaver could not "
            "compare\n"
            "  caused by (std::runtime_error): MinSaver could not compare\n"
            "  caused by (std::out_of_range): No available data for the key: val-mea");
}

TEST(PrintException, ACauseThatIsNotAStdExceptionIsSaidToBeUnknown) {
  const std::string text = described([] {
    try {
      throw 42;
    } catch (...) {
      std::throw_with_nested(std::runtime_error("outer"));
    }
  });
  EXPECT_EQ(text, "error (std::runtime_error): outer\n  caused by: an exception of unknown type");
}

TEST(PrintException, LibTorchErrorsAreShownWithoutTheirStackTrace) {
  const std::string text = described([] { TORCH_CHECK(false, "shapes do not match"); });
  EXPECT_EQ(text, "error (c10::Error): shapes do not match");
}

// What LibTorch's what() looks like: the message, then its stack trace.
const char* const kTorchWhat =
    "shapes do not match\n"
    "Exception raised from forward at model.cpp:12 (most recent call first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x3e (0x7f in libc10.so)\n"
    "frame #1: forward + 0x12 (0x55 in job)\n"
    "frame #2: __libc_start_main + 0x85 (0x7f in libc.so.6)\n";

size_t count_lines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
}

// A callback's failure copies the cause's what() into CallbackError's message, as the trainer
// does: LibTorch's stack trace must not come with it.
TEST(PrintException, AMessageThatCopiedLibTorchsWhatLosesTheStackTrace) {
  const std::string text = described([] {
    try {
      throw std::runtime_error(kTorchWhat);
    } catch (const std::exception& e) {
      std::throw_with_nested(CallbackError("Net", "trigger_step", e.what()));
    }
  });
  EXPECT_EQ(text,
            "error (CallbackError): Callback Net failed in trigger_step: shapes do not match\n"
            "  caused by (std::runtime_error): shapes do not match");
}

// The real thing: TORCH_CHECK in a callback, through the trainer's CallbackError.
TEST(PrintException, ATorchCheckInACallbackIsOneLinePerExceptionWithoutFrames) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  auto failing = std::make_shared<testing::ActionCallback>();
  failing->trigger_step_fn = [](testing::ActionCallback&) {
    TORCH_CHECK(false, "shapes do not match");
  };
  const std::string text = described([&] { trainer.train({failing}, {}, 2, 1, 1); });
  EXPECT_EQ(text.find("frame #"), std::string::npos) << text;
  EXPECT_EQ(text.find("Exception raised from"), std::string::npos) << text;
  EXPECT_EQ(count_lines(text), 2u) << text;
  EXPECT_NE(text.find("failed in trigger_step: shapes do not match\n  caused by (c10::Error): "
                      "shapes do not match"),
            std::string::npos)
      << text;
}

TEST(PrintException, ExceptionMessageIsWhatWithoutTheStackTrace) {
  EXPECT_EQ(exception_message(std::runtime_error(kTorchWhat)), "shapes do not match");
  EXPECT_EQ(exception_message(std::runtime_error("frame #1 is not a trace line")),
            "frame #1 is not a trace line");
  try {
    TORCH_CHECK(false, "shapes do not match");
  } catch (const std::exception& e) {
    EXPECT_EQ(exception_message(e), "shapes do not match");
  }
}

// TRAINPACK_BACKTRACE=1 (or the logger at DEBUG) adds the stack trace of the innermost c10::Error.
TEST(PrintException, TheBacktraceIsShownWhenAskedFor) {
  auto torch_error = [] { TORCH_CHECK(false, "shapes do not match"); };
  std::string trace;
  try {
    torch_error();
  } catch (const c10::Error& e) {
    trace = e.what();
  }
  const bool has_frames = trace.find("frame #") != std::string::npos;
  ::setenv(kBacktraceVariable, "1", 1);
  const std::string with = described(torch_error);
  ::unsetenv(kBacktraceVariable);
  const std::string without = described(torch_error);
  EXPECT_EQ(without, "error (c10::Error): shapes do not match");
  if (has_frames) {  // a LibTorch built without its stack traces has none to show
    EXPECT_EQ(with.rfind("error (c10::Error): shapes do not match\n  where LibTorch raised it:\n"
                         "    ",
                         0),
              0u)
        << with;
    EXPECT_NE(with.find("\n    frame #0: "), std::string::npos) << with;
    const logger::Level before = logger::level();
    logger::set_level(logger::Level::kDebug);
    const std::string at_debug = described(torch_error);
    logger::set_level(before);
    EXPECT_EQ(
        at_debug.rfind("error (c10::Error): shapes do not match\n  where LibTorch raised it:\n", 0),
        0u)
        << at_debug;
    EXPECT_NE(at_debug.find("\n    frame #0: "), std::string::npos) << at_debug;
  }
}

TEST(PrintException, PrintWritesTheDescriptionAndANewline) {
  std::ostringstream out;
  print_exception(std::logic_error("call setup_graph first"), out);
  EXPECT_EQ(out.str(), "error (std::logic_error): call setup_graph first\n");
}

}  // namespace print_exception_test
}  // namespace trainpack
