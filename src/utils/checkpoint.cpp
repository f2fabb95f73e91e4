// Checkpoint files (trainpack/utils/checkpoint.h): the `.data` file (torch::pickle_save of a
// Dict[str, Tensor]), its `.index` (format, size, CRC-32C, entry count), the directory's
// `checkpoint` index in TensorFlow's text form, and tensorpack's get_checkpoint_path.
//
// The text formats are parsed by hand: they are a handful of `key: value` lines, and the only
// library that reads protobuf text (libprotobuf) would need a .proto of TensorFlow's
// CheckpointState compiled in for one message of four fields.
#include "trainpack/utils/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>
#include <utility>

#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/crc32c.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDataSuffix = ".data";
constexpr const char* kIndexSuffix = ".index";
constexpr const char* kFormatLine = "trainpack-checkpoint 1";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Reads the whole file; nullopt when it does not exist. Other errors: CheckpointError.
std::optional<std::vector<char>> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw CheckpointError(path, fmt::format("cannot open: {}", std::strerror(errno)));
  }
  std::vector<char> data;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) data.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw CheckpointError(path, fmt::format("cannot read: {}", std::strerror(err)));
    }
    if (n == 0) break;
    data.insert(data.end(), buf, buf + n);
  }
  ::close(fd);
  return data;
}

std::vector<char> read_existing_file(const std::string& path, const char* what) {
  auto data = read_file(path);
  if (!data) throw CheckpointError(path, fmt::format("{} does not exist", what));
  return std::move(*data);
}

// Receives the data file's bytes from PyTorchStreamWriter and writes them to the temporary file:
// small pieces (zip headers, padding, the pickle) through a buffer, tensor storages straight from
// the tensors, with the CRC-32C of everything on the way. It never fails towards the zip writer:
// an exception thrown through miniz's C code, or from the writer's destructor (which finishes an
// unfinished archive), could end the program; the first error is kept and finish() rethrows it.
class DataFileSink {
 public:
  explicit DataFileSink(AtomicFileWriter* file) : file_(file) { buffer_.reserve(kBufferBytes); }

  size_t write(const void* data, size_t size) noexcept {
    if (error_ || size == 0) return size;
    try {
      if (data == nullptr) {
        throw std::logic_error("write_checkpoint: the zip writer skipped bytes without data");
      }
      crc_ = crc32c::extend(crc_, data, size);
      bytes_ += size;
      if (buffer_.size() + size > kBufferBytes) flush();
      if (size >= kBufferBytes) {
        file_->write(data, size);
      } else {
        buffer_.append(static_cast<const char*>(data), size);
      }
    } catch (...) {
      error_ = std::current_exception();
    }
    return size;
  }

  // Writes what is buffered; rethrows the first error.
  void finish() {
    if (!error_) flush();
    if (error_) std::rethrow_exception(error_);
  }

  uint64_t bytes() const { return bytes_; }
  uint32_t crc32c() const { return crc_; }

 private:
  static constexpr size_t kBufferBytes = size_t{1} << 16;

  void flush() {
    file_->write(buffer_);
    buffer_.clear();
  }

  AtomicFileWriter* file_;
  std::string buffer_;
  std::exception_ptr error_;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

// ---- `<prefix>.index` ----

struct DataIndex {
  uint64_t data_bytes = 0;
  uint32_t data_crc32c = 0;
  uint64_t entries = 0;
};

std::string format_data_index(const DataIndex& index) {
  return fmt::format("format: {}\ndata_bytes: {}\ndata_crc32c: 0x{:08x}\nentries: {}\n",
                     kFormatLine, index.data_bytes, index.data_crc32c, index.entries);
}

bool parse_uint(const std::string& text, int base, uint64_t* out) {
  if (text.empty() || text[0] == '-' || text[0] == '+' ||
      std::isspace(static_cast<unsigned char>(text[0])))
    return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, base);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = v;
  return true;
}

// Strict: the format line first, then each of data_bytes, data_crc32c, entries exactly once, one
// `key: value` per line, every line ended by '\n'.
DataIndex parse_data_index(const std::string& path, const std::string& text) {
  if (text.empty()) throw CheckpointError(path, "the index file is empty");
  if (text.back() != '\n')
    throw CheckpointError(path, "the index file is truncated (no final newline)");
  DataIndex index;
  std::set<std::string> seen;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) {
      throw CheckpointError(path,
                            fmt::format("line {}: expected 'key: value', got '{}'", line_no, line));
    }
    const std::string key = line.substr(0, colon);
    const std::string value = line.substr(colon + 2);
    if (line_no == 1) {
      if (key != "format") {
        throw CheckpointError(
            path, "not a trainpack checkpoint index (the first line is not 'format: ...')");
      }
      if (value != kFormatLine) {
        throw CheckpointError(
            path,
            fmt::format("unsupported format '{}' (this trainpack reads '{}')", value, kFormatLine));
      }
      continue;
    }
    if (!seen.insert(key).second) {
      throw CheckpointError(path, fmt::format("line {}: '{}' appears twice", line_no, key));
    }
    uint64_t v = 0;
    if (key == "data_bytes") {
      if (!parse_uint(value, 10, &v))
        throw CheckpointError(path, fmt::format("line {}: bad data_bytes '{}'", line_no, value));
      index.data_bytes = v;
    } else if (key == "data_crc32c") {
      if (value.size() != 10 || value.compare(0, 2, "0x") != 0 ||
          !parse_uint(value.substr(2), 16, &v))
        throw CheckpointError(path, fmt::format("line {}: bad data_crc32c '{}'", line_no, value));
      index.data_crc32c = static_cast<uint32_t>(v);
    } else if (key == "entries") {
      if (!parse_uint(value, 10, &v))
        throw CheckpointError(path, fmt::format("line {}: bad entries '{}'", line_no, value));
      index.entries = v;
    } else if (key == "format") {
      throw CheckpointError(path, fmt::format("line {}: 'format' appears twice", line_no));
    } else {
      throw CheckpointError(path, fmt::format("line {}: unknown field '{}'", line_no, key));
    }
  }
  for (const char* key : {"data_bytes", "data_crc32c", "entries"}) {
    if (seen.count(key) == 0)
      throw CheckpointError(path, fmt::format("the index file lacks '{}'", key));
  }
  return index;
}

DataIndex read_data_index(const std::string& prefix) {
  const std::string path = prefix + kIndexSuffix;
  const std::vector<char> bytes = read_existing_file(path, "the checkpoint's index file");
  return parse_data_index(path, std::string(bytes.begin(), bytes.end()));
}

// Reads `<prefix>.data` and checks its size and CRC-32C against the index.
std::vector<char> read_checked_data(const std::string& prefix, DataIndex* index_out = nullptr) {
  const DataIndex index = read_data_index(prefix);
  const std::string path = prefix + kDataSuffix;
  std::vector<char> data = read_existing_file(path, "the checkpoint's data file");
  if (data.size() != index.data_bytes) {
    throw CheckpointError(
        path, fmt::format("{} ({} bytes, but its index says {})",
                          data.size() < index.data_bytes ? "truncated" : "has the wrong size",
                          data.size(), index.data_bytes));
  }
  const uint32_t crc = crc32c::value(data.data(), data.size());
  if (crc != index.data_crc32c) {
    throw CheckpointError(path,
                          fmt::format("checksum mismatch (CRC-32C 0x{:08x}, but its index says "
                                      "0x{:08x}): the file is corrupt",
                                      crc, index.data_crc32c));
  }
  if (index_out != nullptr) *index_out = index;
  return data;
}

// ---- the `checkpoint` index file (protobuf text format) ----

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

bool parse_double(const std::string& text, double* out) {
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

std::string join_path(const std::string& dir, const std::string& name) {
  if (fs::path(name).is_absolute()) return name;
  return (fs::path(dir) / name).string();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Checkpoint files

void write_checkpoint(const std::string& prefix, const TensorMap& tensors,
                      const CheckpointWriteOptions& options) {
  if (prefix.empty()) throw std::invalid_argument("write_checkpoint: the prefix is empty");
  c10::Dict<std::string, at::Tensor> dict;
  dict.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) {
      throw std::invalid_argument(
          fmt::format("write_checkpoint({}): the tensor '{}' is undefined", prefix, name));
    }
    at::Tensor t = tensor.detach();
    if (!t.device().is_cpu()) t = t.to(at::kCPU);
    dict.insert(name, std::move(t));
  }
  // torch::jit::pickle_save, with the archive streamed into the file instead of built in memory
  // (a second copy of every tensor, in a vector that grows by doubling): the same bytes. The
  // pickle itself (names and tensor metadata, a few KB) is made first, before any file exists.
  std::vector<char> pickle_bytes;
  torch::jit::Pickler archive_pickler([&pickle_bytes](const char* bytes, size_t size) {
    pickle_bytes.insert(pickle_bytes.end(), bytes, bytes + size);
  });
  archive_pickler.protocol();
  archive_pickler.pushIValue(c10::IValue(std::move(dict)));
  archive_pickler.stop();

  // Both files are written in full before either is renamed: a failed write replaces nothing.
  AtomicFileWriter data_file(prefix + kDataSuffix, options.fsync());
  DataFileSink sink(&data_file);
  {
    caffe2::serialize::PyTorchStreamWriter zip(
        [&sink](const void* bytes, size_t size) { return sink.write(bytes, size); });
    torch::jit::writeArchiveAndTensors("data", pickle_bytes.data(), pickle_bytes.size(),
                                       archive_pickler.tensorData(), zip);
    zip.writeEndOfFile();
  }
  sink.finish();  // rethrows a write error (disk full, file too large) naming the file
  data_file.finish();

  DataIndex index;
  index.data_bytes = sink.bytes();
  index.data_crc32c = sink.crc32c();
  index.entries = tensors.size();
  AtomicFileWriter index_file(prefix + kIndexSuffix, options.fsync());
  index_file.write(format_data_index(index));
  index_file.finish();
  data_file.commit();
  index_file.commit();
  if (options.fsync()) fsync_directory(parent_directory(prefix));
}

TensorMap read_checkpoint(const std::string& prefix) {
  DataIndex index;
  const std::vector<char> data = read_checked_data(prefix, &index);
  const std::string path = prefix + kDataSuffix;
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(data);
  } catch (const std::exception& e) {
    throw CheckpointError(path, fmt::format("PyTorch cannot decode it: {}", e.what()));
  }
  if (!value.isGenericDict()) {
    throw CheckpointError(path, fmt::format("holds a {}, not a dict of tensors", value.tagKind()));
  }
  TensorMap out;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      throw CheckpointError(path, fmt::format("holds a dict entry of {} -> {}, not str -> Tensor",
                                              item.key().tagKind(), item.value().tagKind()));
    }
    out.emplace(item.key().toStringRef(), item.value().toTensor());
  }
  if (out.size() != index.entries) {
    throw CheckpointError(
        path, fmt::format("holds {} entries, but its index says {}", out.size(), index.entries));
  }
  return out;
}

std::string verify_checkpoint(const std::string& prefix) {
  try {
    (void)read_checked_data(prefix);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

bool checkpoint_exists(const std::string& prefix) {
  std::error_code ec;
  return fs::exists(prefix + kIndexSuffix, ec);
}

void remove_checkpoint(const std::string& prefix) {
  for (const char* suffix : {kIndexSuffix, kDataSuffix}) {
    const std::string path = prefix + suffix;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      TP_LOG_WARN("Cannot delete the old checkpoint file {}: {}", path, std::strerror(errno));
    }
  }
}

void copy_checkpoint(const std::string& from, const std::string& to,
                     const CheckpointWriteOptions& options) {
  // The source is checked first: a corrupt checkpoint is not copied.
  const std::vector<char> data = read_checked_data(from);
  const std::vector<char> index =
      read_existing_file(from + kIndexSuffix, "the checkpoint's index file");
  AtomicFileWriter data_file(to + kDataSuffix, options.fsync());
  data_file.write(data.data(), data.size());
  data_file.finish();
  AtomicFileWriter index_file(to + kIndexSuffix, options.fsync());
  index_file.write(index.data(), index.size());
  index_file.finish();
  data_file.commit();
  index_file.commit();
  if (options.fsync()) fsync_directory(parent_directory(to));
}

// ---------------------------------------------------------------------------------------------
// The `checkpoint` index file

std::optional<CheckpointIndex> read_checkpoint_index(const std::string& dir) {
  const std::string path = join_path(dir, kCheckpointIndexFile);
  const auto bytes = read_file(path);
  if (!bytes) return std::nullopt;
  const std::string text(bytes->begin(), bytes->end());
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
      throw CheckpointError(
          path, fmt::format("line {}: expected 'field: value', got '{}'", line_no, line));
    }
    const std::string key = trim(line.substr(0, colon));
    const std::string value = trim(line.substr(colon + 1));
    const auto bad = [&](const char* what) {
      return CheckpointError(path,
                             fmt::format("line {}: {} for '{}': {}", line_no, what, key, value));
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
      if (!parse_double(value, &v)) throw bad("not a number");
      if (key == "all_model_checkpoint_timestamps") {
        index.all_model_checkpoint_timestamps.push_back(v);
      } else {
        if (have_preserved)
          throw CheckpointError(path, fmt::format("line {}: '{}' appears twice", line_no, key));
        have_preserved = true;
        index.last_preserved_timestamp = v;
      }
    } else {
      throw CheckpointError(path, fmt::format("line {}: unknown field '{}'", line_no, key));
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
  const std::string path = join_path(dir, kCheckpointIndexFile);
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
  write_file_atomically(path, text, options.fsync());
}

std::string resolve_checkpoint_path(const std::string& path) {
  if (path.empty()) throw CheckpointError(path, "the checkpoint path is empty");
  std::string p = path;
  // tensorpack: a bare file name is relative to the current directory.
  if (fs::path(p).filename().string() == p) p = "./" + p;
  std::error_code ec;
  const bool is_dir = fs::is_directory(p, ec);
  if (is_dir || fs::path(p).filename() == kCheckpointIndexFile) {
    const std::string dir = is_dir ? p : parent_directory(p);
    const auto index = read_checkpoint_index(dir);
    if (!index) {
      throw CheckpointError(
          path, fmt::format("no checkpoint index file '{}' in {}", kCheckpointIndexFile, dir));
    }
    p = join_path(dir, index->model_checkpoint_path);
  } else {
    for (const std::string suffix : {kDataSuffix, kIndexSuffix}) {
      if (ends_with(p, suffix)) {
        const std::string q = p.substr(0, p.size() - suffix.size());
        TP_LOG_INFO("Checkpoint path {} is auto-corrected to {}.", p, q);
        p = q;
        break;
      }
    }
  }
  if (!checkpoint_exists(p)) {
    throw CheckpointError(p,
                          fmt::format("no such checkpoint ({}{} does not exist)", p, kIndexSuffix));
  }
  return p;
}

}  // namespace trainpack
