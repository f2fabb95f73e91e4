#include "trainpack/callbacks/json_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "trainpack/train/trainer.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace fs = std::filesystem;

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
    out += JSONWriter::format_value(kv.second);
  }
  out += '}';
}

// str() of a Python number, as tensorpack's log lines print it ("nan", "inf", "2.0", "2").
std::string python_str(const StatValue& v) {
  if (std::holds_alternative<int64_t>(v)) return std::to_string(std::get<int64_t>(v));
  return python_float_repr(std::get<double>(v));
}

// ---------------------------------------------------------------------------------------------
// Reading. nlohmann-json parses each entry; the array around the entries is scanned here, so that
// the complete entries of a truncated file can be kept. Python's NaN / Infinity / -Infinity (not
// JSON, but what json.dump writes) are turned into marker strings before nlohmann sees them.

constexpr const char* kNaNMarker = "\x01trainpack:NaN";
constexpr const char* kInfMarker = "\x01trainpack:Infinity";
constexpr const char* kNegInfMarker = "\x01trainpack:-Infinity";

struct ParsedStats {
  enum class Kind { kValid, kTruncated, kMalformed };
  Kind kind = Kind::kValid;
  std::vector<StatsEntry> entries;
  std::string reason;        // kMalformed: why
  size_t dropped_bytes = 0;  // kTruncated: the bytes after the complete entries
};

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

ParsedStats parse_stats(const std::string& text) {
  ParsedStats r;
  auto malformed = [&r](std::string why) {
    r.kind = ParsedStats::Kind::kMalformed;
    r.entries.clear();
    r.reason = std::move(why);
    return r;
  };
  const std::string_view s(text);
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
    r.kind = ParsedStats::Kind::kTruncated;
    r.dropped_bytes = s.size() - complete;
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
    r.kind = ParsedStats::Kind::kTruncated;
    r.dropped_bytes = s.size() - (i + 1);
    return r;
  }
  return malformed(fmt::format("unexpected data after the closing ']' at byte {}", j));
}

// ---------------------------------------------------------------------------------------------
// Files

[[noreturn]] void throw_errno(const std::string& what, const std::string& path, int err) {
  throw std::system_error(err, std::generic_category(), what + " " + path);
}

// Reads the whole file. Throws std::system_error.
std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open", path, errno);
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw_errno("cannot read", path, err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

void write_all_at(int fd, std::string_view data, int64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done,
                               static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot write", path, errno);
    }
    done += static_cast<size_t>(n);
  }
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open directory", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw_errno("cannot fsync directory", dir, err);
}

// Writes `data` to `path` as a new file: `<path>.tmp`, fsync, rename, directory fsync.
void write_file_atomically(const std::string& path, const std::string& dir, std::string_view data) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("cannot create", tmp, errno);
  try {
    write_all_at(fd, data, 0, tmp);
    if (::fsync(fd) != 0) throw_errno("cannot fsync", tmp, errno);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) throw_errno("cannot close", tmp, errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw_errno("cannot rename " + tmp + " to", path, errno);
  fsync_dir(dir);
}

std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%m%d-%H%M%S", &tm);
  return buf;
}

// `<dir>/stats.json.<label><MMDD-HHMMSS>`, with `-1`, `-2`, ... added if that name is taken.
std::string backup_path(const std::string& path, const std::string& label) {
  const std::string base = path + "." + label + timestamp();
  std::string candidate = base;
  std::error_code ec;
  for (int k = 1; fs::exists(fs::symlink_status(candidate, ec)); ++k) {
    candidate = base + "-" + std::to_string(k);
  }
  return candidate;
}

void copy_file_synced(const std::string& from, const std::string& to, const std::string& dir) {
  const std::string data = read_file(from);
  const int fd = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("cannot create", to, errno);
  try {
    write_all_at(fd, data, 0, to);
    if (::fsync(fd) != 0) throw_errno("cannot fsync", to, errno);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  fsync_dir(dir);
}

void move_file(const std::string& from, const std::string& to, const std::string& dir) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw_errno("cannot rename " + from + " to", to, errno);
  fsync_dir(dir);
}

std::string join(const std::string& dir, const char* name) {
  return (fs::path(dir) / name).string();
}

std::string resolve_dir(const std::optional<std::string>& dir, const char* method) {
  if (dir) return *dir;
  auto logdir = logger::get_logger_dir();
  if (!logdir) {
    throw std::invalid_argument(fmt::format(
        "JSONWriter::{}: no directory given and the logger directory is not set", method));
  }
  return *logdir;
}

void warn_truncated(const std::string& path, const ParsedStats& p) {
  TP_LOG_WARN(
      "{} is truncated (an append was cut short): kept its {} complete entries, ignored the last "
      "{} bytes.",
      path, p.entries.size(), p.dropped_bytes);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// JSONWriter

std::string JSONWriter::format_value(const StatValue& value) {
  if (std::holds_alternative<int64_t>(value)) return std::to_string(std::get<int64_t>(value));
  const double v = std::get<double>(value);
  // json.dump's floatstr: repr(), except for the non-finite values.
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(v);
}

std::string JSONWriter::dump(const StatsEntry& entry) {
  std::string out;
  append_entry(out, entry);
  return out;
}

std::string JSONWriter::dump(const std::vector<StatsEntry>& entries) {
  std::string out = "[";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += ", ";
    append_entry(out, entries[i]);
  }
  out += ']';
  return out;
}

JSONWriter::JSONWriter() {
  auto dir = logger::get_logger_dir();
  if (!dir) {
    throw std::invalid_argument(
        "JSONWriter: the logger directory is not set (call logger::set_logger_dir first, or use "
        "JSONWriter::create(), which gives a NoOpMonitor then)");
  }
  dir_ = *dir;
  path_ = join(dir_, FILENAME);
}

JSONWriter::~JSONWriter() {
  if (fd_ >= 0) {
    if (dirty_) (void)::fdatasync(fd_);
    ::close(fd_);
  }
}

MonitorPtr JSONWriter::create() {
  if (!logger::get_logger_dir()) {
    TP_LOG_WARN("logger directory was not set. Ignore JSONWriter.");
    return std::make_shared<NoOpMonitor>("JSONWriter");
  }
  return std::make_shared<JSONWriter>();
}

std::optional<std::vector<StatsEntry>> JSONWriter::load_existing_json(
    std::optional<std::string> dir) {
  const std::string path = join(resolve_dir(dir, "load_existing_json"), FILENAME);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::system_error& e) {
    throw std::runtime_error(fmt::format("JSONWriter: {}", e.what()));
  }
  ParsedStats p = parse_stats(text);
  if (p.kind == ParsedStats::Kind::kMalformed) {
    throw std::runtime_error(
        fmt::format("JSONWriter: {} is not a valid stats file: {}", path, p.reason));
  }
  if (p.kind == ParsedStats::Kind::kTruncated) warn_truncated(path, p);
  return std::move(p.entries);
}

std::optional<int64_t> JSONWriter::load_existing_epoch_number(std::optional<std::string> dir) {
  try {
    auto stats = load_existing_json(std::move(dir));
    if (!stats || stats->empty()) return std::nullopt;
    const StatValue* v = stats->back().find("epoch_num");
    if (v == nullptr) return std::nullopt;
    if (std::holds_alternative<int64_t>(*v)) return std::get<int64_t>(*v);
    const double d = std::get<double>(*v);  // Python's int(): truncation toward zero
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return std::nullopt;
    return static_cast<int64_t>(d);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void JSONWriter::process_scalar(const std::string& name, double value) {
  stat_now_.set(name, value);
}

void JSONWriter::_setup_graph() {
  close_file();
  stats_.clear();
  stat_now_ = StatsEntry();
  need_rewrite_ = false;
  disabled_ = false;
}

void JSONWriter::_before_train() {
  adopt_existing_file();
  _trigger();
  sync();
}

void JSONWriter::adopt_existing_file() {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path_, ec))) return;
  std::string text;
  ParsedStats p;
  try {
    text = read_file(path_);
    p = parse_stats(text);
  } catch (const std::system_error& e) {
    p.kind = ParsedStats::Kind::kMalformed;
    p.reason = e.what();
  }
  try {
    if (p.kind == ParsedStats::Kind::kMalformed) {
      const std::string backup = backup_path(path_, "malformed-");
      move_file(path_, backup, dir_);
      TP_LOG_WARN("{} is not a valid stats file ({}); moved it to {} and starting a new {}.", path_,
                  p.reason, backup, FILENAME);
      return;
    }
    if (p.kind == ParsedStats::Kind::kTruncated) warn_truncated(path_, p);

    // tensorpack: `epoch = stats[-1]['epoch_num'] + 1`, None on any error.
    const StatValue* last = p.entries.empty() ? nullptr : p.entries.back().find("epoch_num");
    const int64_t starting_epoch = trainer().starting_epoch();
    bool follows = true;
    if (last != nullptr) {
      if (std::holds_alternative<int64_t>(*last)) {
        follows = std::get<int64_t>(*last) + 1 == starting_epoch;
      } else {
        follows = std::get<double>(*last) + 1 == static_cast<double>(starting_epoch);
      }
    }
    if (!follows) {
      TP_LOG_WARN(
          "History epoch={} from JSON is not the predecessor of the current starting_epoch={}",
          python_str(*last), starting_epoch);
      TP_LOG_WARN(
          "If you want to resume old training, either use `AutoResumeTrainConfig` or correctly "
          "set the new starting_epoch yourself to avoid inconsistency. ");
      const std::string backup = backup_path(path_, "");
      TP_LOG_WARN("Now, we will train with starting_epoch={} and backup old json to {}",
                  starting_epoch, backup);
      move_file(path_, backup, dir_);
      return;
    }

    TP_LOG_INFO("Found existing JSON inside {}, will append to it.", dir_);
    stats_ = std::move(p.entries);
    if (p.kind == ParsedStats::Kind::kValid && text.back() == ']') {
      // Appended to as it is: the bytes already there are never touched.
      fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
      if (fd_ < 0) throw_errno("cannot open", path_, errno);
      close_offset_ = static_cast<int64_t>(text.size()) - 1;
      return;
    }
    // Truncated, or followed by white space: keep a copy of the file as found, then rewrite it
    // once (temporary file and rename) with the complete entries.
    const std::string backup =
        backup_path(path_, p.kind == ParsedStats::Kind::kTruncated ? "truncated-" : "orig-");
    copy_file_synced(path_, backup, dir_);
    rewrite_all();
    TP_LOG_WARN("Rewrote {} with its {} complete entries; the file as found is kept as {}.", path_,
                stats_.size(), backup);
  } catch (const std::exception& e) {
    // The file could not be set aside, copied or opened: leave it as it is, and write nothing
    // this run rather than risk replacing it.
    close_file();
    stats_.clear();
    disabled_ = true;
    TP_LOG_ERROR(
        "Exception in JSONWriter._write_stat()! {}; {} is left as it is and nothing is "
        "written to it in this training.",
        e.what(), path_);
  }
}

void JSONWriter::_trigger_step() {
  // The last step of an epoch is written together with the epoch's entry.
  if (trainer().local_step() != trainer().steps_per_epoch() - 1) _trigger();
}

void JSONWriter::_trigger_epoch() {
  _trigger();
  sync();
}

void JSONWriter::_trigger() {
  if (stat_now_.empty()) return;
  stat_now_.erase("epoch_num");
  stat_now_.erase("global_step");
  stat_now_.items.emplace_back("epoch_num", StatValue(epoch_num()));
  stat_now_.items.emplace_back("global_step", StatValue(global_step()));
  stats_.push_back(std::move(stat_now_));
  stat_now_ = StatsEntry();
  write_stat();
}

void JSONWriter::_after_train() {
  // Nothing is written here (tensorpack's behaviour); what was written reaches the disk.
  sync();
  close_file();
}

void JSONWriter::write_stat() {
  if (disabled_) return;
  try {
    if (fd_ < 0 || need_rewrite_) {
      rewrite_all();
      return;
    }
    // Overwrite the closing ']' with `, {entry}]` in one write: the file is valid JSON again as
    // soon as the write completes, and the bytes before the ']' are never touched.
    std::string tail = stats_.size() > 1 ? ", " : "";
    append_entry(tail, stats_.back());
    tail += ']';
    dirty_ = true;
    write_all_at(fd_, tail, close_offset_, path_);
    close_offset_ += static_cast<int64_t>(tail.size()) - 1;
  } catch (const std::exception& e) {
    TP_LOG_ERROR("Exception in JSONWriter._write_stat()! {}", e.what());
    close_file();
    need_rewrite_ = true;
  }
}

void JSONWriter::rewrite_all() {
  close_file();
  const std::string text = dump(stats_);
  write_file_atomically(path_, dir_, text);
  fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) throw_errno("cannot open", path_, errno);
  close_offset_ = static_cast<int64_t>(text.size()) - 1;
  need_rewrite_ = false;
}

void JSONWriter::sync() {
  if (fd_ < 0 || !dirty_) return;
  if (::fdatasync(fd_) != 0) {
    TP_LOG_ERROR("Exception in JSONWriter._write_stat()! cannot fdatasync {}: {}", path_,
                 std::strerror(errno));
    return;
  }
  dirty_ = false;
}

void JSONWriter::close_file() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  dirty_ = false;
}

}  // namespace trainpack
