#include "trainpack/utils/float_repr.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <system_error>

namespace trainpack {

std::string python_float_repr(double value) {
  std::string out;
  append_python_float_repr(out, value);
  return out;
}

void append_python_float_repr(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "nan";
    return;
  }
  if (std::isinf(value)) {
    out += value > 0 ? "inf" : "-inf";
    return;
  }
  // The shortest round-trip digits come from std::to_chars (scientific: "d.ddde+XX"); only the
  // layout is Python's.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  if (!sci.empty() && sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  const std::string_view mantissa = sci.substr(0, e_pos);
  std::string_view exp_text = sci.substr(e_pos + 1);
  if (!exp_text.empty() && exp_text.front() == '+') exp_text.remove_prefix(1);
  int exponent = 0;
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);
  char digit_buf[32];
  int ndigits = 0;
  for (char c : mantissa) {
    if (c != '.') digit_buf[ndigits++] = c;
  }
  const std::string_view digits(digit_buf, static_cast<size_t>(ndigits));
  // Python's repr: digits d1 d2 ... with the decimal point after position `decpt` (value =
  // 0.d1d2... * 10^decpt); scientific when decpt <= -4 or decpt > 16.
  const int decpt = exponent + 1;
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (ndigits > 1) {
      out += '.';
      out += digits.substr(1);
    }
    const int abs_exp = std::abs(exponent);
    out += exponent < 0 ? "e-" : "e+";
    if (abs_exp < 10) out += '0';
    char exp_buf[8];
    const auto e = std::to_chars(exp_buf, exp_buf + sizeof exp_buf, abs_exp);
    out.append(exp_buf, static_cast<size_t>(e.ptr - exp_buf));
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt < ndigits) {
    out += digits.substr(0, static_cast<size_t>(decpt));
    out += '.';
    out += digits.substr(static_cast<size_t>(decpt));
  } else {
    out += digits;
    out.append(static_cast<size_t>(decpt - ndigits), '0');
    out += ".0";
  }
}

}  // namespace trainpack
