// The `checkpoint` index file (trainpack/utils/checkpoint_index.h): TensorFlow's CheckpointState
// in protobuf's text format.
//
// The text is parsed by hand: the index is a handful of `key: value` lines, and the only library
// that reads protobuf text (libprotobuf) would need a .proto of TensorFlow's CheckpointState
// compiled in for one message of four fields.
#include "trainpack/utils/checkpoint_index.h"

#include <sys/stat.h>

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "trainpack/detail/checkpoint_files.h"
#include "trainpack/utils/atomic_file.h"

namespace trainpack {

namespace fs = std::filesystem;

namespace {

// The largest `checkpoint` index read: a real one is a few hundred bytes per checkpoint kept.
constexpr uint64_t kMaxIndexBytes = uint64_t{1} << 20;

// protobuf's CEscape: \n \r \t \" \' \\ and octal for other bytes outside printable ASCII.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\'':
        out += "\\'";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          out += fmt::format("\\{:03o}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Parses one quoted string (single or double quotes, C escapes) that makes up all of `value`.
// Returns false when it is not one.
bool unquote(const std::string& value, std::string* out) {
  if (value.size() < 2) return false;
  const char q = value[0];
  if ((q != '"' && q != '\'') || value.back() != q) return false;
  std::string s;
  for (size_t i = 1; i + 1 < value.size(); ++i) {
    const char c = value[i];
    if (c == q || c == '\n') return false;
    if (c != '\\') {
      s += c;
      continue;
    }
    if (i + 2 >= value.size()) return false;  // a backslash escaping the closing quote
    const char e = value[++i];
    switch (e) {
      case 'n':
        s += '\n';
        break;
      case 'r':
        s += '\r';
        break;
      case 't':
        s += '\t';
        break;
      case 'a':
        s += '\a';
        break;
      case 'b':
        s += '\b';
        break;
      case 'f':
        s += '\f';
        break;
      case 'v':
        s += '\v';
        break;
      case '?':
        s += '?';
        break;
      case '"':
        s += '"';
        break;
      case '\'':
        s += '\'';
        break;
      case '\\':
        s += '\\';
        break;
      case 'x': {
        int v = 0, n = 0;
        while (n < 2 && i + 2 < value.size() &&
               std::isxdigit(static_cast<unsigned char>(value[i + 1]))) {
          const char h = value[++i];
          v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
          ++n;
        }
        if (n == 0) return false;
        s += static_cast<char>(v);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          int v = e - '0', n = 1;
          while (n < 3 && i + 2 < value.size() && value[i + 1] >= '0' && value[i + 1] <= '7') {
            v = v * 8 + (value[++i] - '0');
            ++n;
          }
          if (v > 0xff) return false;
          s += static_cast<char>(v);
          break;
        }
        return false;
    }
  }
  *out = std::move(s);
  return true;
}

bool parse_timestamp(const std::string& text, double* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

std::string trim(const std::string& s) {
  const char* ws = " \t\r";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

std::optional<CheckpointIndex> read_checkpoint_index(const std::string& dir) {
  const std::string path = detail::join_checkpoint_path(dir, kCheckpointIndexFile);
  const auto bytes = detail::read_checkpoint_file(path, "checkpoint index", kMaxIndexBytes,
                                                  /*follow_symlinks=*/false);
  if (!bytes) return std::nullopt;
  return parse_checkpoint_index(std::string(bytes->begin(), bytes->end()), path);
}

CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& path) {
  CheckpointIndex index;
  bool have_latest = false, have_preserved = false;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = trim(text.substr(pos, nl - pos));
    pos = nl + 1;
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      throw CheckpointError(path, fmt::format("line {}: expected 'field: value' (not an index "
                                              "that ModelSaver wrote)",
                                              line_no));
    }
    const std::string key = trim(line.substr(0, colon));
    const std::string value = trim(line.substr(colon + 1));
    const auto bad = [&](const char* what) {
      return CheckpointError(path, fmt::format("line {}: {} for '{}'", line_no, what, key));
    };
    if (key == "model_checkpoint_path" || key == "all_model_checkpoint_paths") {
      std::string s;
      if (!unquote(value, &s)) throw bad("not a quoted string");
      if (key == "all_model_checkpoint_paths") {
        index.all_model_checkpoint_paths.push_back(std::move(s));
      } else {
        if (have_latest)
          throw CheckpointError(path, fmt::format("line {}: '{}' appears twice", line_no, key));
        have_latest = true;
        index.model_checkpoint_path = std::move(s);
      }
    } else if (key == "all_model_checkpoint_timestamps" || key == "last_preserved_timestamp") {
      double v = 0;
      if (!parse_timestamp(value, &v)) throw bad("not a number");
      if (key == "all_model_checkpoint_timestamps") {
        index.all_model_checkpoint_timestamps.push_back(v);
      } else {
        if (have_preserved)
          throw CheckpointError(path, fmt::format("line {}: '{}' appears twice", line_no, key));
        have_preserved = true;
        index.last_preserved_timestamp = v;
      }
    } else {
      throw CheckpointError(path, fmt::format("line {}: an unknown field (not an index that "
                                              "ModelSaver wrote)",
                                              line_no));
    }
  }
  if (!have_latest || index.model_checkpoint_path.empty()) {
    throw CheckpointError(path, "names no checkpoint (no model_checkpoint_path)");
  }
  if (!index.all_model_checkpoint_timestamps.empty() &&
      index.all_model_checkpoint_timestamps.size() != index.all_model_checkpoint_paths.size()) {
    throw CheckpointError(path, fmt::format("has {} all_model_checkpoint_timestamps for {} "
                                            "all_model_checkpoint_paths",
                                            index.all_model_checkpoint_timestamps.size(),
                                            index.all_model_checkpoint_paths.size()));
  }
  return index;
}

void write_checkpoint_index(const std::string& dir, const CheckpointIndex& index,
                            const CheckpointWriteOptions& options) {
  const std::string path = detail::join_checkpoint_path(dir, kCheckpointIndexFile);
  if (index.model_checkpoint_path.empty()) {
    throw std::invalid_argument("write_checkpoint_index(" + path +
                                "): model_checkpoint_path is empty");
  }
  if (!index.all_model_checkpoint_timestamps.empty() &&
      index.all_model_checkpoint_timestamps.size() != index.all_model_checkpoint_paths.size()) {
    throw std::invalid_argument(fmt::format(
        "write_checkpoint_index({}): {} timestamps for {} paths", path,
        index.all_model_checkpoint_timestamps.size(), index.all_model_checkpoint_paths.size()));
  }
  std::string text = "model_checkpoint_path: " + quote(index.model_checkpoint_path) + "\n";
  for (const auto& p : index.all_model_checkpoint_paths) {
    text += "all_model_checkpoint_paths: " + quote(p) + "\n";
  }
  for (const double t : index.all_model_checkpoint_timestamps) {
    text += fmt::format("all_model_checkpoint_timestamps: {}\n", t);
  }
  if (index.last_preserved_timestamp != 0) {
    text += fmt::format("last_preserved_timestamp: {}\n", index.last_preserved_timestamp);
  }
  replace_file_by_swap(path, detail::join_checkpoint_path(dir, kCheckpointIndexSwapFile), text,
                       options.fsync());
}

std::string index_entry_problem(const std::string& dir, const std::string& entry,
                                std::string* prefix) {
  if (entry.empty()) return "an empty path";
  const fs::path named = fs::path(detail::join_checkpoint_path(dir, entry)).lexically_normal();
  // The checkpoint must be in the directory itself (ModelSaver writes it there): `..` paths and
  // absolute paths elsewhere are refused, as is a subdirectory or a symlinked one.
  std::error_code ec;
  const fs::path here = fs::canonical(dir.empty() ? "." : dir, ec);
  if (ec) return fmt::format("its directory {} cannot be read: {}", dir, ec.message());
  const fs::path parent =
      fs::weakly_canonical(named.has_parent_path() ? named.parent_path() : fs::path("."), ec);
  if (ec || parent != here || named.filename().empty() || named.filename() == "." ||
      named.filename() == "..") {
    return fmt::format(
        "a path outside the directory {} (the index names only checkpoints in "
        "its own directory)",
        dir);
  }
  const std::string data = named.string() + detail::kCheckpointDataSuffix;
  struct stat st {};
  if (::lstat(data.c_str(), &st) != 0) {
    if (errno == ENOENT) return fmt::format("{} does not exist", data);
    return fmt::format("{} cannot be read: {}", data, std::strerror(errno));
  }
  if (S_ISLNK(st.st_mode)) {
    return fmt::format(
        "{} is a symbolic link (ModelSaver writes regular files; a link in a "
        "directory others can write may have been planted), not followed",
        data);
  }
  if (!S_ISREG(st.st_mode)) return fmt::format("{} is not a regular file", data);
  if (prefix != nullptr) *prefix = detail::join_checkpoint_path(dir, named.filename().string());
  return "";
}

}  // namespace trainpack
