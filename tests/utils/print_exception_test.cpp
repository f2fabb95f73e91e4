// print_exception / describe_exception: the whole chain of nested exceptions, one line each.
#include "trainpack/utils/print_exception.h"

#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>

#include "trainpack/exceptions.h"

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

TEST(PrintException, PrintWritesTheDescriptionAndANewline) {
  std::ostringstream out;
  print_exception(std::logic_error("call setup_graph first"), out);
  EXPECT_EQ(out.str(), "error (std::logic_error): call setup_graph first\n");
}

}  // namespace print_exception_test
}  // namespace trainpack
