// print_exception: the whole chain of an exception (std::nested_exception), for the catch at the
// end of main(): trainpack wraps what a hook throws in CallbackError with the original nested, so
// the outer what() alone may hide the cause. One line per exception, outermost first, each with
// its demangled type (without a leading `trainpack::`):
//   error (CallbackError): Callback InferenceRunner failed in before_train: ...
//     caused by (std::invalid_argument): InferenceRunner: the tower did not output 'cost'; ...
// LibTorch's stack trace is left out of every message (exception_message). With
// TRAINPACK_BACKTRACE=1, or the logger at DEBUG level, the stack trace of the innermost
// c10::Error follows, after a line "  where LibTorch raised it:". A nested exception that is not
// a std::exception is `caused by: an exception of unknown type`. See docs/trainer.md, "Printing
// errors".
#pragma once

#include <exception>
#include <iosfwd>
#include <string>

namespace trainpack {

// The environment variable that, set to "1", adds LibTorch's stack trace to describe_exception.
constexpr const char* kBacktraceVariable = "TRAINPACK_BACKTRACE";

// `e`'s message without LibTorch's stack trace (c10::Error's what_without_backtrace(), and the
// backtrace lines of a message that copied a c10::Error's what()).
std::string exception_message(const std::exception& e);

// The text print_exception writes, without the trailing newline.
std::string describe_exception(const std::exception& e);

// Writes describe_exception(e) and a newline to `out` (std::cerr when not given), and flushes it.
void print_exception(const std::exception& e);
void print_exception(const std::exception& e, std::ostream& out);

}  // namespace trainpack
