#include "trainpack/utils/file_names.h"

#include <fmt/format.h>

#include <cstdint>

namespace trainpack {
namespace {

bool is_bad_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return c == '/' || c == '\\' || u < 0x20 || u == 0x7f;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// FNV-1a: a hash that is the same on every platform and run (std::hash is not promised to be).
uint32_t fnv1a(std::string_view s) {
  uint32_t h = 2166136261u;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h;
}

}  // namespace

bool is_reserved_file_name(std::string_view name) {
  for (const std::string_view own : {"checkpoint", "stats.json", "log.log", "hyper.txt"}) {
    if (name == own || (starts_with(name, own) && name[own.size()] == '.')) return true;
  }
  if (starts_with(name, "events.out.tfevents")) return true;
  if (ends_with(name, ".tmp") || ends_with(name, ".lock")) return true;
  constexpr std::string_view model = "model-";
  if (starts_with(name, model)) {
    size_t i = model.size();
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    if (i > model.size() && (i == name.size() || name[i] == '.')) return true;
  }
  return false;
}

std::string safe_file_name_component(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (is_bad_byte(c)) c = '_';
  }
  if (out.empty()) out = "_";
  if (out[0] == '.') out[0] = '_';
  // Before the cut: a cut name ends in the hash, and starts as the name did, so it is reserved
  // only if the name was.
  if (is_reserved_file_name(out)) out = "_" + out;
  if (out.size() > kMaxFileNameComponent) {
    const std::string tail = fmt::format("-{:08x}", fnv1a(text));
    size_t keep = kMaxFileNameComponent - tail.size();
    // Back up to the first byte of a UTF-8 character (continuation bytes are 10xxxxxx).
    while (keep > 0 && (static_cast<unsigned char>(out[keep]) & 0xC0) == 0x80) --keep;
    out = out.substr(0, keep) + tail;
  }
  return out;
}

std::optional<std::string> file_name_problem(std::string_view name) {
  if (name.empty()) return std::string("it is empty");
  for (const char c : name) {
    if (c == '/' || c == '\\') return fmt::format("it contains '{}'", c);
    if (is_bad_byte(c)) {
      return fmt::format("it contains the control character \\x{:02x}",
                         static_cast<unsigned char>(c));
    }
  }
  if (name[0] == '.') return std::string("it starts with '.' (a hidden file, '.' or '..')");
  if (name.size() > kMaxFileNameComponent) {
    return fmt::format("it is {} bytes long, more than {}", name.size(), kMaxFileNameComponent);
  }
  if (is_reserved_file_name(name)) {
    return std::string("it is, or could be, one of trainpack's own files in the directory");
  }
  return std::nullopt;
}

}  // namespace trainpack
