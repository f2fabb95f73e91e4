// print_exception: the whole chain of an exception, for the catch at the end of main().
//
//   int main() try {
//     ...
//     trainer.train_with_defaults(...);
//   } catch (const std::exception& e) {
//     trainpack::print_exception(e);  // "error (CallbackError): Callback MinSaver failed ..."
//     return 1;
//   }
//
// trainpack wraps what a hook throws in CallbackError and nests the original
// (std::nested_exception), so what() of the outer exception alone may hide the cause's type; an
// exception that escapes main calls std::terminate, which aborts (a core dump, and the nested
// causes are never shown). print_exception writes one line per exception of the chain, outermost
// first, each with its type:
//
//   error (CallbackError): Callback InferenceRunner failed in before_train: ...
//     caused by (std::invalid_argument): InferenceRunner: the tower did not output 'cost'; ...
//
// Types are demangled, without a leading `trainpack::`. LibTorch's c10::Error is shown without
// the C++ stack trace that its what() carries (what_without_backtrace()), and so is a message that
// copied such a what() (the lines "frame #N: ..." and "Exception raised from ... (most recent call
// first):" are left out): one line per exception. With TRAINPACK_BACKTRACE=1 in the environment,
// or the logger at DEBUG level, the stack trace of the innermost c10::Error follows the chain,
// indented, after a line "  where LibTorch raised it:". A nested exception that is not a
// std::exception is `caused by: an exception of unknown type`.
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
