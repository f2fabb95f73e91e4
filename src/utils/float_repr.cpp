#include "trainpack/utils/float_repr.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <system_error>

namespace trainpack {

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest round-trip digits come from std::to_chars (scientific: "d.ddde+XX"); only the
  // layout is Python's.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (!sci.empty() && sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  const std::string_view mantissa = sci.substr(0, e_pos);
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  // Python's repr: digits d1 d2 ... with the decimal point after position `decpt` (value =
  // 0.d1d2... * 10^decpt); scientific when decpt <= -4 or decpt > 16.
  const int decpt = exponent + 1;
  const int ndigits = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (ndigits > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    const int abs_exp = std::abs(exponent);
    out += exponent < 0 ? "e-" : "e+";
    if (abs_exp < 10) out += '0';
    out += std::to_string(abs_exp);
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt < ndigits) {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out += '.';
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  } else {
    out += digits;
    out.append(static_cast<size_t>(decpt - ndigits), '0');
    out += ".0";
  }
  return out;
}

}  // namespace trainpack
