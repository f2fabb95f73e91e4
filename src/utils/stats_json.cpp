// The stats.json format: StatsEntry, writing in Python json.dump's exact layout, and the tolerant
// reader that keeps the complete entries of a truncated file (trainpack/utils/stats_json.h).
#include "trainpack/utils/stats_json.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "trainpack/utils/float_repr.h"

namespace trainpack {

// ---------------------------------------------------------------------------------------------
// StatsEntry

const StatValue* StatsEntry::find(const std::string& key) const {
  for (const auto& kv : items) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

void StatsEntry::set(const std::string& key, StatValue value) {
  for (auto& kv : items) {
    if (kv.first == key) {
      kv.second = value;
      return;
    }
  }
  items.emplace_back(key, value);
}

void StatsEntry::erase(const std::string& key) {
  for (auto it = items.begin(); it != items.end(); ++it) {
    if (it->first == key) {
      items.erase(it);
      return;
    }
  }
}

bool StatsEntry::operator==(const StatsEntry& other) const {
  if (items.size() != other.items.size()) return false;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& a = items[i];
    const auto& b = other.items[i];
    if (a.first != b.first || a.second.index() != b.second.index()) return false;
    if (std::holds_alternative<int64_t>(a.second)) {
      if (std::get<int64_t>(a.second) != std::get<int64_t>(b.second)) return false;
    } else {
      const double x = std::get<double>(a.second), y = std::get<double>(b.second);
      // NaN equals NaN here: entries compare as the text they are written as.
      if (!(x == y || (std::isnan(x) && std::isnan(y)))) return false;
    }
  }
  return true;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Writing: Python's json.dump with its defaults (ensure_ascii=True, allow_nan=True).

void append_hex4(std::string& out, unsigned v) {
  static const char* kHex = "0123456789abcdef";  // Python writes lowercase hex digits
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(v >> shift) & 0xF];
}

// Decodes one UTF-8 sequence at s[i]; returns the code point and advances i, or returns U+FFFD
// for an invalid byte (advancing by one). A std::string need not be valid UTF-8; Python's str is.
uint32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len = 0;
  uint32_t cp = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    ++i;
    return 0xFFFD;
  }
  if (i + static_cast<size_t>(len) > s.size()) {
    ++i;
    return 0xFFFD;
  }
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return 0xFFFD;
  }
  i += static_cast<size_t>(len);
  return cp;
}

// A JSON string as Python's json.dumps writes it (py_encode_basestring_ascii).
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = next_code_point(s, i);
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp >= 0x20 && cp <= 0x7E) {
          out += static_cast<char>(cp);
        } else if (cp < 0x10000) {
          append_hex4(out, cp);
        } else {  // a surrogate pair
          const uint32_t v = cp - 0x10000;
          append_hex4(out, 0xD800 | (v >> 10));
          append_hex4(out, 0xDC00 | (v & 0x3FF));
        }
    }
  }
  out += '"';
}

void append_entry(std::string& out, const StatsEntry& entry) {
  out += '{';
  bool first = true;
  for (const auto& kv : entry.items) {
    if (!first) out += ", ";
    first = false;
    append_json_string(out, kv.first);
    out += ": ";
    out += format_stat_value(kv.second);
  }
  out += '}';
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writing: the public functions

std::string format_stat_value(const StatValue& value) {
  if (std::holds_alternative<int64_t>(value)) return std::to_string(std::get<int64_t>(value));
  std::string out;
  append_stat_value(out, std::get<double>(value));
  return out;
}

void append_stat_value(std::string& out, double v) {
  // json.dump's floatstr: repr(), except for the non-finite values.
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "Infinity" : "-Infinity";
  } else {
    append_python_float_repr(out, v);
  }
}

std::string format_stats_entry(const StatsEntry& entry) {
  std::string out;
  append_entry(out, entry);
  return out;
}

std::string format_stats_key(std::string_view key) {
  std::string out;
  append_json_string(out, key);
  return out;
}

std::string format_stats_file(const std::vector<StatsEntry>& entries) {
  std::string out = "[";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += ", ";
    append_entry(out, entries[i]);
  }
  out += ']';
  return out;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Reading. nlohmann-json parses each entry; the array around the entries is scanned here, so that
// the complete entries of a truncated file can be kept. Python's NaN / Infinity / -Infinity (not
// JSON, but what json.dump writes) are turned into marker strings before nlohmann sees them.

constexpr const char* kNaNMarker = "\x01trainpack:NaN";
constexpr const char* kInfMarker = "\x01trainpack:Infinity";
constexpr const char* kNegInfMarker = "\x01trainpack:-Infinity";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// Replaces Python's non-finite literals outside strings with marker strings. With `at_end_ok`, a
// literal cut short at the end of `s` (`Na`, `-Inf`) is dropped, so that a parser sees the end of
// the input there.
std::string replace_python_literals(std::string_view s, bool at_end_ok) {
  static const std::pair<std::string_view, std::string> kLiterals[] = {
      {"NaN", std::string("\"\\u0001trainpack:NaN\"")},
      {"Infinity", std::string("\"\\u0001trainpack:Infinity\"")},
      {"-Infinity", std::string("\"\\u0001trainpack:-Infinity\"")},
  };
  std::string out;
  out.reserve(s.size());
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < s.size()) {
        out += s[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool replaced = false;
    for (const auto& lit : kLiterals) {
      const std::string_view rest = s.substr(i);
      if (rest.substr(0, lit.first.size()) == lit.first) {
        out += lit.second;
        i += lit.first.size() - 1;
        replaced = true;
        break;
      }
      if (at_end_ok && rest.size() < lit.first.size() && lit.first.substr(0, rest.size()) == rest) {
        return out;  // a literal (or a lone `-`) cut short by the end of the input
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

// The end (one past the closing brace) of the object starting at s[i] == '{', or npos when the
// input ends first.
size_t object_end(std::string_view s, size_t i) {
  int depth = 0;
  bool in_string = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// Parses one complete object; on failure returns false with `why`.
bool parse_entry(std::string_view text, size_t index, StatsEntry& entry, std::string& why) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(replace_python_literals(text, false));
  } catch (const nlohmann::json::exception& e) {
    why = fmt::format("entry {} is not valid JSON ({})", index, e.what());
    return false;
  }
  if (!j.is_object()) {
    why = fmt::format("entry {} is not a JSON object", index);
    return false;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto& v = it.value();
    StatValue value;
    if (v.is_number_integer() && !v.is_number_unsigned()) {
      value = v.get<int64_t>();
    } else if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        value = static_cast<double>(u);
      } else {
        value = static_cast<int64_t>(u);
      }
    } else if (v.is_number_float()) {
      value = v.get<double>();
    } else if (v.is_string() && v.get_ref<const std::string&>() == kNaNMarker) {
      value = std::numeric_limits<double>::quiet_NaN();
    } else if (v.is_string() && v.get_ref<const std::string&>() == kInfMarker) {
      value = std::numeric_limits<double>::infinity();
    } else if (v.is_string() && v.get_ref<const std::string&>() == kNegInfMarker) {
      value = -std::numeric_limits<double>::infinity();
    } else {
      why = fmt::format("the value of \"{}\" in entry {} is not a number", it.key(), index);
      return false;
    }
    entry.items.emplace_back(it.key(), value);
  }
  return true;
}

// True when `tail` (what follows the complete part of the file) can be the beginning of more
// entries: an append cut short. NUL bytes are what a power loss leaves in a file that was extended
// but whose data never reached the disk; they count as cut short too.
bool is_cut_short(std::string_view tail, bool after_entry) {
  if (tail.find('\0') != std::string_view::npos) return true;
  const std::string probe = (after_entry ? "[0" : "[") + replace_python_literals(tail, true);
  try {
    const auto parsed = nlohmann::ordered_json::parse(probe);
    (void)parsed;
    return true;  // cannot happen (no closing bracket), but then nothing is wrong either
  } catch (const nlohmann::json::parse_error& e) {
    return e.byte > probe.size();  // the parser wanted more input
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reading: the public function

ParsedStats parse_stats_file(std::string_view text) {
  ParsedStats r;
  auto malformed = [&r](std::string why) {
    r.status = ParsedStats::Status::kMalformed;
    r.entries.clear();
    r.message = std::move(why);
    return r;
  };
  const std::string_view s = text;
  size_t i = skip_ws(s, 0);
  if (s.empty()) return malformed("the file is empty");
  if (i == s.size()) return malformed("the file holds only white space");
  if (s[i] != '[') return malformed("it is not a JSON array");
  ++i;
  size_t complete = i;  // end of the complete part: "[" and every complete entry
  auto truncated = [&]() {
    if (!is_cut_short(s.substr(complete), !r.entries.empty())) {
      return malformed(fmt::format("entry {} is not valid JSON", r.entries.size()));
    }
    r.status = ParsedStats::Status::kTruncated;
    r.bytes_ignored = s.size() - complete;
    return r;
  };
  while (true) {
    i = skip_ws(s, i);
    if (i == s.size()) return truncated();
    if (s[i] == ']') break;
    if (!r.entries.empty()) {
      if (s[i] != ',') {
        if (s[i] == '\0') return truncated();
        return malformed(
            fmt::format("expected ',' or ']' after entry {} at byte {}", r.entries.size() - 1, i));
      }
      i = skip_ws(s, i + 1);
      if (i == s.size()) return truncated();
    }
    if (s[i] != '{') {
      if (s[i] == '\0') return truncated();
      return malformed(fmt::format("entry {} is not a JSON object", r.entries.size()));
    }
    const size_t end = object_end(s, i);
    if (end == std::string_view::npos) return truncated();
    const std::string_view obj = s.substr(i, end - i);
    if (obj.find('\0') != std::string_view::npos) return truncated();
    StatsEntry entry;
    std::string why;
    if (!parse_entry(obj, r.entries.size(), entry, why)) return malformed(why);
    r.entries.push_back(std::move(entry));
    complete = i = end;
  }
  // s[i] == ']': only white space may follow (Python: "Extra data"), or NUL bytes that a power
  // loss left after a write that made the file longer (the entries are all there).
  size_t j = skip_ws(s, i + 1);
  if (j == s.size()) return r;
  if (s.substr(j).find_first_not_of(std::string_view("\0 \t\r\n", 5)) == std::string_view::npos) {
    r.status = ParsedStats::Status::kTruncated;
    r.bytes_ignored = s.size() - (i + 1);
    return r;
  }
  return malformed(fmt::format("unexpected data after the closing ']' at byte {}", j));
}

}  // namespace trainpack
