// The parser of hyper-parameter files (trainpack/utils/hyper_txt.h).
#include "trainpack/utils/hyper_txt.h"

#include <charconv>
#include <sstream>
#include <system_error>
#include <vector>

namespace trainpack {

namespace {

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const auto begin = s.find_first_not_of(ws);
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(ws);
  return s.substr(begin, end - begin + 1);
}

}  // namespace

std::optional<double> parse_python_float(const std::string& text) {
  std::string s = strip(text);
  if (!s.empty() && s[0] == '+') s.erase(0, 1);
  if (s.empty() || s[0] == '+') return std::nullopt;
  double value = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

HyperTxtLookup lookup_hyper_txt(const std::string& text, const std::string& name) {
  // Python's readlines(): a final newline ends the last line and starts none.
  std::vector<std::string> lines;
  std::string line;
  std::istringstream stream(text);
  while (std::getline(stream, line)) lines.push_back(line);

  HyperTxtLookup out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string stripped = strip(lines[i]);
    if (stripped.empty() || stripped[0] == '#') continue;
    const auto colon = stripped.find(':');
    std::optional<double> value;
    std::string key;
    if (colon != std::string::npos && stripped.find(':', colon + 1) == std::string::npos) {
      key = strip(stripped.substr(0, colon));
      value = parse_python_float(stripped.substr(colon + 1));
    }
    if (key.empty() || !value) {
      if (out.bad_lines++ == 0) out.first_bad_line = i + 1;
      continue;
    }
    if (key == name) {  // the last line for the name wins, as in a Python dict
      out.value = value;
      out.line = i + 1;
    }
  }
  return out;
}

}  // namespace trainpack
