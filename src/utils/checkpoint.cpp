// Checkpoint files (trainpack/utils/checkpoint.h): the `.data` file (torch::pickle_save of a
// Dict[str, Tensor] whose zip comment is the checksum trailer), and tensorpack's
// get_checkpoint_path. The directory's `checkpoint` index is in checkpoint_index.cpp. One module
// over 700 lines: writing, reading and verifying the one file format share its layout checks.
//
// The trailer is parsed by hand: it is one line.
#include "trainpack/utils/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/storage_context.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "trainpack/detail/checkpoint_files.h"
#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/crc32c.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/pickle_check.h"
#include "trainpack/utils/pickle_tensors.h"
#include "trainpack/utils/zip_directory.h"

namespace trainpack {

namespace fs = std::filesystem;

// ---- shared with the `checkpoint` index (detail/checkpoint_files.h) ----

namespace detail {

std::optional<std::vector<char>> read_checkpoint_file(const std::string& path, const char* kind,
                                                      uint64_t max_bytes, bool follow_symlinks,
                                                      bool owner_only) {
  ReadFileOptions options;
  options.kind = kind;
  options.max_bytes = max_bytes;
  options.follow_symlinks = follow_symlinks;
  options.owner_only = owner_only;
  try {
    return read_file_if_exists<std::vector<char>>(path, options);
  } catch (const FileRefusedError& e) {
    // "is not a regular file (a FIFO)" -> "<path>: not a regular file (a FIFO)"
    const std::string& r = e.reason();
    throw CheckpointError(path, r.rfind("is ", 0) == 0 ? r.substr(3) : r);
  } catch (const std::system_error& e) {
    throw CheckpointError(path, fmt::format("cannot read: {}", e.code().message()));
  }
}

std::string join_checkpoint_path(const std::string& dir, const std::string& name) {
  if (fs::path(name).is_absolute()) return name;
  return (fs::path(dir) / name).string();
}

}  // namespace detail

namespace {

// The file that format 1 wrote beside the data file; only named in an error message now.
constexpr const char* kFormat1IndexSuffix = ".index";
constexpr const char* kTrailerMagic = "trainpack-checkpoint";
constexpr int kFormatVersion = 2;

// The zip format's end-of-central-directory record: 22 bytes, the last two of which are the
// length of the archive comment that follows it (zip's APPNOTE, section 4.3.16).
constexpr size_t kZipEndRecordBytes = 22;
constexpr char kZipEndRecordMagic[] = {'P', 'K', 5, 6};
// The longest trailer this reader looks for (the real one is about 50 bytes).
constexpr size_t kMaxTrailerBytes = 128;

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

uint16_t read_le16(const char* p) {
  return static_cast<uint16_t>(static_cast<unsigned char>(p[0]) |
                               (static_cast<unsigned char>(p[1]) << 8));
}

void write_le16(char* p, uint16_t v) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>(v >> 8);
}

// The last `max_bytes` bytes of a file (all of it when shorter); nullopt when it cannot be read.
std::optional<std::string> read_tail(const std::string& path, size_t max_bytes) {
  // O_NONBLOCK: a FIFO under the name is not waited on (fstat then finds it is not a file).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::string> out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const auto size = static_cast<size_t>(st.st_size);
    const size_t n = std::min(size, max_bytes);
    std::string tail(n, '\0');
    if (::pread(fd, tail.data(), n, static_cast<off_t>(size - n)) == static_cast<ssize_t>(n)) {
      out = std::move(tail);
    }
  }
  ::close(fd);
  return out;
}

// ---- the trailer: `trainpack-checkpoint 2 entries=<n> crc32c=<8 lowercase hex digits>` ----

struct Trailer {
  uint64_t entries = 0;
  uint32_t crc32c = 0;
  size_t checked_bytes = 0;  // the bytes before the trailer, which the CRC covers
};

std::string trailer_head(uint64_t entries) {
  return fmt::format("{} {} entries={} crc32c=", kTrailerMagic, kFormatVersion, entries);
}

bool parse_digits(const std::string& text, int base, uint64_t* out) {
  if (text.empty() || text.size() > 19) return false;
  for (const char c : text) {
    const bool ok =
        base == 10 ? (c >= '0' && c <= '9') : ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!ok) return false;
  }
  *out = std::strtoull(text.c_str(), nullptr, base);
  return true;
}

// Finds the zip end record at the end of `data` (the last `size` bytes of the file) whose
// comment runs exactly to the end, and returns the comment's offset; npos when there is none.
size_t find_comment(const char* data, size_t size) {
  const size_t window = std::min(size, kZipEndRecordBytes + kMaxTrailerBytes);
  for (size_t back = kZipEndRecordBytes; back <= window; ++back) {
    const char* record = data + size - back;
    if (std::memcmp(record, kZipEndRecordMagic, sizeof kZipEndRecordMagic) == 0 &&
        read_le16(record + kZipEndRecordBytes - 2) == back - kZipEndRecordBytes) {
      return size - back + kZipEndRecordBytes;
    }
  }
  return std::string::npos;
}

// `text` with every byte outside printable ASCII written as \xNN, for an error message.
std::string printable(const std::string& text) {
  std::string out;
  for (const unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

// Whether a zip comment that does not start with the trailer's magic is a damaged trailer rather
// than another program's comment (torch.save writes none): its first bytes differ from the magic
// in a few places only, or it carries the trailer's fields.
bool looks_like_damaged_trailer(const std::string& comment) {
  const std::string magic = kTrailerMagic;
  if (comment.find(" entries=") != std::string::npos ||
      comment.find(" crc32c=") != std::string::npos) {
    return true;
  }
  if (comment.size() < magic.size()) return false;
  size_t differences = 0;
  for (size_t i = 0; i < magic.size(); ++i) differences += comment[i] != magic[i];
  return differences <= 3;
}

// Parses the trailer at the end of a data file (`data`, `size`: the whole file, or its tail when
// only the trailer is wanted). Throws CheckpointError naming `path` when there is none or it is
// malformed; says so when a format-1 `.index` lies beside the file.
Trailer parse_trailer(const std::string& path, const char* data, size_t size,
                      const std::string& prefix) {
  if (size == 0) throw CheckpointError(path, "the checkpoint's data file is empty");
  const size_t at = find_comment(data, size);
  if (at == std::string::npos) {
    throw CheckpointError(path,
                          "truncated or not a checkpoint: it does not end with a zip end record "
                          "and trainpack's checksum trailer");
  }
  const std::string comment(data + at, size - at);
  const std::string magic = std::string(kTrailerMagic) + " ";
  if (comment.compare(0, magic.size(), magic) != 0) {
    std::error_code ec;
    if (fs::exists(prefix + kFormat1IndexSuffix, ec)) {
      throw CheckpointError(
          path, fmt::format("written by an earlier trainpack (checkpoint format 1, with its "
                            "checksum in {}{}), which this version does not read; start a new "
                            "run (--no-resume) or load it with torch.load in Python",
                            fs::path(prefix).filename().string(), kFormat1IndexSuffix));
    }
    if (looks_like_damaged_trailer(comment)) {
      throw CheckpointError(
          path, fmt::format("corrupt: its checksum trailer is damaged ('{}' where '{} {} "
                            "entries=<n> crc32c=<checksum>' belongs); the file cannot be trusted",
                            printable(comment), kTrailerMagic, kFormatVersion));
    }
    throw CheckpointError(path,
                          "has no trainpack checksum trailer (a zip archive, but not written by "
                          "trainpack's write_checkpoint: a torch.save file?)");
  }
  const size_t version_end = comment.find(' ', magic.size());
  const std::string version = comment.substr(magic.size(), version_end - magic.size());
  if (version != std::to_string(kFormatVersion)) {
    throw CheckpointError(path,
                          fmt::format("unsupported checkpoint format '{} {}' (this trainpack reads "
                                      "'{} {}')",
                                      kTrailerMagic, version, kTrailerMagic, kFormatVersion));
  }
  // The rest: exactly " entries=<digits> crc32c=<8 lowercase hex>".
  const auto bad = [&] {
    return CheckpointError(path, fmt::format("malformed checksum trailer '{}'", comment));
  };
  if (version_end == std::string::npos) throw bad();
  const std::string rest = comment.substr(version_end);
  const std::string entries_key = " entries=", crc_key = " crc32c=";
  const size_t crc_at = rest.find(crc_key);
  if (rest.compare(0, entries_key.size(), entries_key) != 0 || crc_at == std::string::npos) {
    throw bad();
  }
  Trailer trailer;
  uint64_t crc = 0;
  const std::string crc_text = rest.substr(crc_at + crc_key.size());
  if (!parse_digits(rest.substr(entries_key.size(), crc_at - entries_key.size()), 10,
                    &trailer.entries) ||
      crc_text.size() != 8 || !parse_digits(crc_text, 16, &crc)) {
    throw bad();
  }
  trailer.crc32c = static_cast<uint32_t>(crc);
  trailer.checked_bytes = at;
  return trailer;
}

// Receives the data file's bytes from PyTorchStreamWriter and writes them to the temporary file:
// small pieces (zip headers, padding, the pickle) through a buffer, tensor storages straight from
// the tensors, with the CRC-32C of everything on the way; finish() turns the zip's comment into
// the trailer. It never fails towards the zip writer: an exception thrown through miniz's C
// code, or from the writer's destructor (which finishes an unfinished archive), could end the
// program; the first error is kept and finish() rethrows it.
class DataFileSink {
 public:
  explicit DataFileSink(AtomicFileWriter* file) : file_(file) { buffer_.reserve(kBufferBytes); }

  size_t write(const void* data, size_t size) noexcept {
    if (error_ || size == 0) return size;
    try {
      if (data == nullptr) {
        throw std::logic_error("write_checkpoint: the zip writer skipped bytes without data");
      }
      if (buffer_.size() + size > kBufferBytes) flush();
      if (size >= kBufferBytes) {
        crc_ = crc32c::extend(crc_, data, size);
        file_->write(data, size);
      } else {
        buffer_.append(static_cast<const char*>(data), size);
      }
    } catch (...) {
      error_ = std::current_exception();
    }
    return size;
  }

  // The archive is complete and its end record (the last 22 bytes written, still in the buffer:
  // a small write) says "no comment". Sets the comment length to the trailer's, so that the CRC
  // covers it, and appends the trailer: the file stays a valid zip (torch.load reads it) and
  // carries its own checksum. Rethrows the first error.
  void finish(uint64_t entries) {
    if (!error_) {
      try {
        const size_t n = buffer_.size();
        if (n < kZipEndRecordBytes ||
            std::memcmp(buffer_.data() + n - kZipEndRecordBytes, kZipEndRecordMagic,
                        sizeof kZipEndRecordMagic) != 0 ||
            read_le16(buffer_.data() + n - 2) != 0) {
          throw std::logic_error(
              "write_checkpoint: the zip archive does not end with an end record without comment");
        }
        const std::string head = trailer_head(entries);
        write_le16(buffer_.data() + n - 2, static_cast<uint16_t>(head.size() + 8));
        crc_ = crc32c::extend(crc_, buffer_.data(), n);
        buffer_ += head;
        buffer_ += fmt::format("{:08x}", crc_);
        file_->write(buffer_);
        buffer_.clear();
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static constexpr size_t kBufferBytes = size_t{1} << 16;

  void flush() {
    crc_ = crc32c::extend(crc_, buffer_.data(), buffer_.size());
    file_->write(buffer_);
    buffer_.clear();
  }

  AtomicFileWriter* file_;
  std::string buffer_;
  std::exception_ptr error_;
  uint32_t crc_ = 0;
};

// Reads `<prefix>.data` and checks it against its trailer.
// Checks `data`, the bytes of the data file `path` of checkpoint `prefix`, against its trailer.
Trailer check_trailer(const std::string& path, const std::string& prefix,
                      const std::vector<char>& data) {
  const Trailer trailer = parse_trailer(path, data.data(), data.size(), prefix);
  const uint32_t crc = crc32c::value(data.data(), trailer.checked_bytes);
  if (crc != trailer.crc32c) {
    throw CheckpointError(path,
                          fmt::format("checksum mismatch (CRC-32C 0x{:08x}, but its trailer says "
                                      "0x{:08x}): the file is corrupt",
                                      crc, trailer.crc32c));
  }
  return trailer;
}

// Reads `<prefix>.data` and checks it against its trailer.
std::vector<char> read_checked_data(const std::string& prefix,
                                    const CheckpointReadOptions& options) {
  const std::string path = prefix + detail::kCheckpointDataSuffix;
  auto data = detail::read_checkpoint_file(path, "checkpoint", std::numeric_limits<uint64_t>::max(),
                                           /*follow_symlinks=*/!options.own_files_only(),
                                           /*owner_only=*/options.own_files_only());
  if (!data) {
    throw CheckpointError(path, "the checkpoint's data file does not exist");
  }
  (void)check_trailer(path, prefix, *data);
  return std::move(*data);
}

// ---- what LibTorch's reader does not check ----

// The folder that every entry of a PyTorch archive lies in ("archive/"), with its slash.
std::string archive_top(const std::string& path, const ZipDirectory& zip) {
  if (zip.entries.empty()) throw CheckpointError(path, "its archive is empty");
  const std::string& first = zip.entries.front().name;
  const size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0) {
    throw CheckpointError(path, fmt::format("its archive entry '{}' is not in a folder, as "
                                            "PyTorch's are",
                                            printable(first)));
  }
  return first.substr(0, slash + 1);
}

// What PyTorchStreamReader's constructor requires, checked first: when it throws, LibTorch 1.13
// leaks the zip reader's memory (found by the fuzzer), and its message carries a C++ backtrace.
// Every entry in `top`, and a version record of decimal digits in the supported range (2.x
// writes `.data/version` beside `version` and reads it first).
void check_archive_layout(const std::string& path, const std::vector<char>& data,
                          const ZipDirectory& zip, const std::string& top) {
  for (const ZipEntry& entry : zip.entries) {
    if (entry.name.compare(0, top.size(), top) != 0) {
      throw CheckpointError(path,
                            fmt::format("corrupt or crafted: its archive entry '{}' is not in "
                                        "the folder '{}' of the others",
                                        printable(entry.name), top));
    }
  }
  const ZipEntry* version = zip.find(top + ".data/version");
  if (version == nullptr) version = zip.find(top + "version");
  if (version == nullptr) throw CheckpointError(path, "its archive has no version record");
  std::string text(data.data() + version->data_offset, static_cast<size_t>(version->size));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  uint64_t number = 0;
  if (text.empty() || text.size() > 4 || !parse_digits(text, 10, &number) ||
      number < caffe2::serialize::kMinSupportedFileFormatVersion ||
      number > caffe2::serialize::kMaxSupportedFileFormatVersion) {
    throw CheckpointError(
        path, fmt::format("its archive's version record '{}' is not a version this LibTorch reads "
                          "({} to {})",
                          printable(text.substr(0, 16)),
                          caffe2::serialize::kMinSupportedFileFormatVersion,
                          caffe2::serialize::kMaxSupportedFileFormatVersion));
  }
}

// LibTorch makes each storage as long as the pickle says (its element count times the element
// size) around the bytes of its record, whatever the record's length: a record cut short would
// let its tensors read the memory after it. Each storage must be exactly as long as its record.
void check_storages_match_records(const std::string& path, const ZipDirectory& zip,
                                  const std::string& top,
                                  torch::jit::DeserializationStorageContext* storages) {
  const std::string folder = top + "data/";
  for (const ZipEntry& entry : zip.entries) {
    if (entry.name.compare(0, folder.size(), folder) != 0) continue;
    const std::string key = entry.name.substr(folder.size());
    if (!storages->hasStorage(key)) continue;  // a record no tensor uses
    const uint64_t bytes = storages->getStorage(key).nbytes();
    if (bytes != entry.size) {
      throw CheckpointError(
          path, fmt::format("corrupt or crafted: storage '{}' is {} bytes by its pickle, but its "
                            "record holds {}",
                            printable(key), bytes, entry.size));
    }
  }
}

// "" when every element of `t` lies inside its storage (tensor_fit_problem); else what does not.
std::string tensor_storage_problem(const at::Tensor& t) {
  const int64_t item = static_cast<int64_t>(t.element_size());
  return tensor_fit_problem(t.storage_offset(), t.sizes().vec(), t.strides().vec(),
                            static_cast<int64_t>(t.storage().nbytes()) / (item > 0 ? item : 1));
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
    // Serialisation, only when a checkpoint is saved: read directly, not through host_read.h.
    if (!t.device().is_cpu()) t = t.to(at::kCPU);
    dict.insert(name, std::move(t));
  }
  // torch::jit::pickle_save, with the archive streamed into the file instead of built in memory
  // (a second copy of every tensor, in a vector that grows by doubling): the same bytes. The
  // pickle itself (names and tensor metadata, a few KB) is made first, before any file exists.
  // One difference from pickle_save: the dict is not tagged with its type (tag_aggregates off),
  // because the tag is a call of torch.jit._pickle.restore_type_tag, which Python's torch.load
  // refuses by default from PyTorch 2.6 on (weights_only=True). LibTorch reads it the same.
  std::vector<char> pickle_bytes;
  torch::jit::Pickler archive_pickler(
      [&pickle_bytes](const char* bytes, size_t size) {
        pickle_bytes.insert(pickle_bytes.end(), bytes, bytes + size);
      },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  archive_pickler.protocol();
  archive_pickler.pushIValue(c10::IValue(std::move(dict)));
  archive_pickler.stop();

  AtomicFileWriter data_file(prefix + detail::kCheckpointDataSuffix, options.fsync());
  DataFileSink sink(&data_file);
  {
    caffe2::serialize::PyTorchStreamWriter zip(
        [&sink](const void* bytes, size_t size) { return sink.write(bytes, size); });
    torch::jit::writeArchiveAndTensors("data", pickle_bytes.data(), pickle_bytes.size(),
                                       archive_pickler.tensorData(), zip);
    zip.writeEndOfFile();
  }
  sink.finish(tensors.size());  // rethrows a write error (disk full, file too large)
  data_file.finish();
  data_file.commit();
  if (options.fsync()) fsync_directory(parent_directory(prefix));
}

TensorMap read_checkpoint(const std::string& prefix, const CheckpointReadOptions& options) {
  return decode_checkpoint(read_checked_data(prefix, options),
                           prefix + detail::kCheckpointDataSuffix);
}

TensorMap decode_checkpoint(const std::vector<char>& data, const std::string& path) {
  const std::string prefix =
      has_suffix(path, detail::kCheckpointDataSuffix)
          ? path.substr(0, path.size() - std::strlen(detail::kCheckpointDataSuffix))
          : path;
  const Trailer trailer = check_trailer(path, prefix, data);
  // The archive is checked before LibTorch reads it: its directory, and the pickle's lengths
  // (a crafted length would be allocated by the unpickler before it finds the bytes missing).
  ZipDirectory zip;
  try {
    zip = read_zip_directory(data.data(), data.size());
  } catch (const ZipError& e) {
    throw CheckpointError(path, fmt::format("corrupt or crafted: {}", e.what()));
  }
  const std::string top = archive_top(path, zip);
  check_archive_layout(path, data, zip, top);
  const ZipEntry* pickle = zip.find(top + "data.pkl");
  if (pickle == nullptr) throw CheckpointError(path, "its archive has no data.pkl");
  if (const std::string problem =
          pickle_bounds_problem(data.data() + pickle->data_offset, pickle->size);
      !problem.empty()) {
    throw CheckpointError(path, fmt::format("corrupt or crafted data.pkl: {}", problem));
  }
  // Every tensor inside its storage, by the pickle's own numbers, before LibTorch builds it (1.13
  // would build it and read past the storage; later releases refuse it without naming it).
  for (const PickledTensor& t : pickled_tensors(data.data() + pickle->data_offset, pickle->size)) {
    if (const std::string problem = t.fit_problem(); !problem.empty()) {
      const std::string tensor = t.name.empty()
                                     ? fmt::format("of storage '{}'", printable(t.storage_key))
                                     : fmt::format("'{}'", printable(t.name));
      throw CheckpointError(path,
                            fmt::format("corrupt or crafted: the tensor {} {}", tensor, problem));
    }
  }
  c10::IValue value;
  auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
  try {
    // torch::jit::pickle_load, with a storage context that keeps each storage by its record name.
    caffe2::serialize::PyTorchStreamReader reader(
        std::make_unique<caffe2::serialize::MemoryReadAdapter>(data.data(),
                                                               static_cast<off_t>(data.size())));
    value = torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                              /*type_resolver=*/{}, /*obj_loader=*/{},
                                              /*device=*/{}, reader,
                                              torch::jit::Unpickler::defaultTypeParser, storages);
  } catch (const c10::Error& e) {
    throw CheckpointError(path,
                          fmt::format("PyTorch cannot decode it: {}", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw CheckpointError(path, fmt::format("PyTorch cannot decode it: {}", e.what()));
  }
  check_storages_match_records(path, zip, top, storages.get());
  if (!value.isGenericDict()) {
    throw CheckpointError(path, fmt::format("holds a {}, not a dict of tensors", value.tagKind()));
  }
  TensorMap out;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      throw CheckpointError(path, fmt::format("holds a dict entry of {} -> {}, not str -> Tensor",
                                              item.key().tagKind(), item.value().tagKind()));
    }
    const std::string& name = item.key().toStringRef();
    const at::Tensor& tensor = item.value().toTensor();
    if (const std::string problem = tensor_storage_problem(tensor); !problem.empty()) {
      throw CheckpointError(
          path, fmt::format("corrupt or crafted: the tensor '{}' {}", printable(name), problem));
    }
    out.emplace(name, tensor);
  }
  if (out.size() != trailer.entries) {
    throw CheckpointError(path, fmt::format("holds {} entries, but its trailer says {}", out.size(),
                                            trailer.entries));
  }
  return out;
}

std::string verify_checkpoint(const std::string& prefix, const CheckpointReadOptions& options) {
  try {
    (void)read_checked_data(prefix, options);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

bool checkpoint_exists(const std::string& prefix) {
  std::error_code ec;
  return fs::exists(prefix + detail::kCheckpointDataSuffix, ec);
}

std::optional<std::string> checkpoint_fingerprint(const std::string& prefix) {
  const std::string path = prefix + detail::kCheckpointDataSuffix;
  const auto tail = read_tail(path, kZipEndRecordBytes + kMaxTrailerBytes);
  if (!tail) return std::nullopt;
  const size_t at = find_comment(tail->data(), tail->size());
  if (at == std::string::npos) return std::nullopt;
  try {
    (void)parse_trailer(path, tail->data(), tail->size(), prefix);
  } catch (const CheckpointError&) {
    return std::nullopt;
  }
  return tail->substr(at);
}

void remove_checkpoint(const std::string& prefix) {
  const std::string path = prefix + detail::kCheckpointDataSuffix;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    TP_LOG_WARN("Cannot delete the old checkpoint file {}: {}", path, std::strerror(errno));
  }
}

void copy_checkpoint(const std::string& from, const std::string& to,
                     const CheckpointWriteOptions& options) {
  // The source is checked first: a corrupt checkpoint is not copied.
  const std::vector<char> data = read_checked_data(from, CheckpointReadOptions());
  AtomicFileWriter data_file(to + detail::kCheckpointDataSuffix, options.fsync());
  data_file.write(data.data(), data.size());
  data_file.finish();
  data_file.commit();
  if (options.fsync()) fsync_directory(parent_directory(to));
}

// ---------------------------------------------------------------------------------------------
// tensorpack's get_checkpoint_path

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
    const std::string problem = index_entry_problem(dir, index->model_checkpoint_path, &p);
    // A missing file is reported below as "no such checkpoint", as for a path given directly.
    if (has_suffix(problem, " does not exist"))
      p = detail::join_checkpoint_path(dir, index->model_checkpoint_path);
    if (!problem.empty() && !has_suffix(problem, " does not exist")) {
      throw CheckpointError(detail::join_checkpoint_path(dir, kCheckpointIndexFile),
                            fmt::format("names \"{}\" as the latest checkpoint: {}",
                                        index->model_checkpoint_path, problem));
    }
  } else {
    // `.index`: what a TensorFlow user (or trainpack's format 1) names a checkpoint by.
    for (const std::string suffix : {detail::kCheckpointDataSuffix, kFormat1IndexSuffix}) {
      if (has_suffix(p, suffix)) {
        const std::string q = p.substr(0, p.size() - suffix.size());
        TP_LOG_INFO("Checkpoint path {} is auto-corrected to {}.", p, q);
        p = q;
        break;
      }
    }
  }
  if (!checkpoint_exists(p)) {
    throw CheckpointError(p, fmt::format("no such checkpoint ({}{} does not exist)", p,
                                         detail::kCheckpointDataSuffix));
  }
  return p;
}

}  // namespace trainpack
