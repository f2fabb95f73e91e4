// The text of a hyper-parameter file (HumanHyperParamSetter's hyper.txt), as tensorpack reads it:
// one `name: value` per line, blank lines and `#` comments allowed, the last line for a name
// winning (a Python dict built from the lines). Values are read as Python's float() reads them
// (an optional sign, decimal or exponent notation, inf, nan), independent of the locale.
//
//   HyperTxtLookup r = lookup_hyper_txt("learning_rate: 0.1\n# note\n", "learning_rate");
//   // r.value == 0.1, r.line == 1
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace trainpack {

struct HyperTxtLookup {
  std::optional<double> value;  // the name's value, when a line gives one
  size_t line = 0;              // the 1-based line it came from (0: none)
  size_t first_bad_line = 0;    // the first line that is not `name: value` (0: none)
  size_t bad_lines = 0;         // how many such lines there are
};

// Looks `name` up in `text`. A file with a malformed line is malformed as a whole: callers use
// `value` only when bad_lines is 0.
HyperTxtLookup lookup_hyper_txt(const std::string& text, const std::string& name);

// Python's float() on all of `text` (surrounding white space allowed); nullopt when it is not a
// number.
std::optional<double> parse_python_float(const std::string& text);

}  // namespace trainpack
