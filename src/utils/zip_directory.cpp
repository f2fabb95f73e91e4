// A strict reader of a zip archive's central directory (trainpack/utils/zip_directory.h).
#include "trainpack/utils/zip_directory.h"

#include <fmt/format.h>

#include <cctype>
#include <set>
#include <string_view>

namespace trainpack {

namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndRecordSignature = 0x06054b50;
constexpr uint32_t kZip64EndRecordSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr size_t kLocalHeaderBytes = 30;
constexpr size_t kCentralHeaderBytes = 46;
constexpr size_t kEndRecordBytes = 22;
constexpr size_t kZip64LocatorBytes = 20;
constexpr size_t kZip64EndRecordBytes = 56;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint32_t kZip64Marker = 0xffffffff;
constexpr uint16_t kKnownFlags = 0x0808;  // bit 3: a data descriptor; bit 11: UTF-8 names

// Little-endian fields of `data[0, size)`, read only after a bounds check.
class Bytes {
 public:
  Bytes(const char* data, size_t size) : data_(data), size_(size) {}

  size_t size() const { return size_; }
  // True when [at, at + n) lies inside the archive (no overflow).
  bool has(uint64_t at, uint64_t n) const { return at <= size_ && n <= size_ - at; }

  uint64_t le(uint64_t at, int bytes) const {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) {
      v = (v << 8) | static_cast<unsigned char>(data_[at + static_cast<uint64_t>(i)]);
    }
    return v;
  }
  uint16_t u16(uint64_t at) const { return static_cast<uint16_t>(le(at, 2)); }
  uint32_t u32(uint64_t at) const { return static_cast<uint32_t>(le(at, 4)); }
  uint64_t u64(uint64_t at) const { return le(at, 8); }
  std::string_view text(uint64_t at, uint64_t n) const {
    return {data_ + at, static_cast<size_t>(n)};
  }

 private:
  const char* data_;
  size_t size_;
};

// The end of the archive: where its central directory is, and how many entries it has.
struct Directory {
  uint64_t offset = 0, size = 0, entries = 0;
  uint64_t end = 0;  // the central directory must end at or before this offset
};

// Finds the end record: the last end-record signature in the file, as miniz (LibTorch's zip
// reader) takes it, whose comment must then reach the end of the data exactly. A signature among
// the last bytes that is not the real record (a crafted or damaged file) is refused rather than
// skipped: the reader that comes after this one would take it.
uint64_t find_end_record(const Bytes& b) {
  if (b.size() < kEndRecordBytes) throw ZipError("not a zip archive: shorter than its end record");
  const uint64_t last = b.size() - 4;
  const uint64_t first = last > 0xffff + kEndRecordBytes ? last - 0xffff - kEndRecordBytes : 0;
  for (uint64_t at = last + 1; at-- > first;) {
    if (b.u32(at) != kEndRecordSignature) continue;
    if (at + kEndRecordBytes <= b.size() && at + kEndRecordBytes + b.u16(at + 20) == b.size()) {
      return at;
    }
    throw ZipError(fmt::format("not a zip archive: its last end-record signature (at offset {}) "
                               "is not an end record whose comment reaches the end of the file",
                               at));
  }
  throw ZipError("not a zip archive: no end record whose comment reaches the end of the file");
}

Directory read_end(const Bytes& b) {
  const uint64_t at = find_end_record(b);
  if (b.u16(at + 4) != 0 || b.u16(at + 6) != 0) {
    throw ZipError("a zip archive spanning several disks (one file is expected)");
  }
  Directory d;
  d.entries = b.u16(at + 10);
  d.size = b.u32(at + 12);
  d.offset = b.u32(at + 16);
  d.end = at;
  if (b.u16(at + 8) != d.entries) {
    throw ZipError("the zip end record's two entry counts differ");
  }
  // Zip64: a locator just before the end record pointing at a zip64 end record. When they are
  // there, their values are the archive's, marked or not, as miniz reads them (PyTorch's writer
  // always writes them); a marked field without them is an error.
  const bool marked = d.entries == 0xffff || d.size == kZip64Marker || d.offset == kZip64Marker;
  if (at >= kZip64LocatorBytes && b.u32(at - kZip64LocatorBytes) == kZip64LocatorSignature) {
    const uint64_t locator = at - kZip64LocatorBytes;
    const uint64_t end64 = b.u64(locator + 8);
    if (end64 <= locator && b.has(end64, kZip64EndRecordBytes) &&
        locator - end64 >= kZip64EndRecordBytes && b.u32(end64) == kZip64EndRecordSignature) {
      if (b.u32(end64 + 16) != 0 || b.u32(end64 + 20) != 0) {
        throw ZipError("a zip64 archive spanning several disks (one file is expected)");
      }
      d.entries = b.u64(end64 + 32);
      if (b.u64(end64 + 24) != d.entries) {
        throw ZipError("the zip64 end record's two entry counts differ");
      }
      d.size = b.u64(end64 + 40);
      d.offset = b.u64(end64 + 48);
      d.end = end64;
      return d;
    }
    if (marked) {
      throw ZipError(fmt::format("the zip64 locator points at offset {}, where no zip64 end "
                                 "record lies",
                                 end64));
    }
    return d;
  }
  if (marked) {
    throw ZipError("the zip end record asks for zip64 fields, but no zip64 locator precedes it");
  }
  return d;
}

// The zip64 extended-information field of a central header's extra data: replaces each of
// `size`, `compressed`, `local` that holds the marker, in that order (APPNOTE 4.5.3).
void apply_zip64_extra(const Bytes& b, uint64_t extra, uint64_t extra_len, const std::string& name,
                       uint64_t* size, uint64_t* compressed, uint64_t* local) {
  uint64_t at = extra;
  const uint64_t end = extra + extra_len;
  while (at + 4 <= end) {
    const uint16_t id = b.u16(at), len = b.u16(at + 2);
    if (len > end - at - 4) {
      throw ZipError(fmt::format("zip entry '{}': an extra field runs past its header", name));
    }
    if (id == kZip64ExtraId) {
      uint64_t field = at + 4;
      const uint64_t field_end = field + len;
      for (uint64_t* value : {size, compressed, local}) {
        if (*value != kZip64Marker) continue;
        if (field + 8 > field_end) {
          throw ZipError(fmt::format("zip entry '{}': its zip64 field is too short", name));
        }
        *value = b.u64(field);
        field += 8;
      }
      return;
    }
    at += 4 + uint64_t{len};
  }
  if (*size == kZip64Marker || *compressed == kZip64Marker || *local == kZip64Marker) {
    throw ZipError(fmt::format("zip entry '{}': a size or offset needs a zip64 field, which is "
                               "missing",
                               name));
  }
}

}  // namespace

const ZipEntry* ZipDirectory::find(const std::string& name) const {
  for (const ZipEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

ZipDirectory read_zip_directory(const char* data, size_t size) {
  const Bytes b(data, size);
  const Directory d = read_end(b);
  if (d.offset > d.end || d.size > d.end - d.offset) {
    throw ZipError(fmt::format("the zip central directory ({} bytes at offset {}) lies outside "
                               "the archive",
                               d.size, d.offset));
  }
  // Each entry takes at least one header: a count beyond that is a lie, refused before reserving.
  if (d.entries > d.size / kCentralHeaderBytes) {
    throw ZipError(fmt::format("the zip end record counts {} entries, more than its central "
                               "directory of {} bytes can hold",
                               d.entries, d.size));
  }
  ZipDirectory out;
  out.entries.reserve(static_cast<size_t>(d.entries));
  std::set<std::string> names;
  uint64_t at = d.offset;
  const uint64_t end = d.offset + d.size;
  for (uint64_t i = 0; i < d.entries; ++i) {
    if (end - at < kCentralHeaderBytes || b.u32(at) != kCentralHeaderSignature) {
      throw ZipError(fmt::format("zip central directory entry {} of {}: no header at offset {}",
                                 i + 1, d.entries, at));
    }
    const uint16_t flags = b.u16(at + 8), method = b.u16(at + 10);
    uint64_t compressed = b.u32(at + 20), length = b.u32(at + 24);
    const uint64_t name_len = b.u16(at + 28), extra_len = b.u16(at + 30),
                   comment_len = b.u16(at + 32);
    uint64_t local = b.u32(at + 42);
    const uint64_t header_len = kCentralHeaderBytes + name_len + extra_len + comment_len;
    if (end - at < header_len) {
      throw ZipError(fmt::format("zip central directory entry {} of {} runs past the directory",
                                 i + 1, d.entries));
    }
    const std::string name(b.text(at + kCentralHeaderBytes, name_len));
    apply_zip64_extra(b, at + kCentralHeaderBytes + name_len, extra_len, name, &length,
                      &compressed, &local);
    // PyTorch's writer sets bit 3 (sizes after the data) and bit 11 (UTF-8 names) only; the
    // others (encryption, patches, masked headers) make miniz refuse the entry.
    if ((flags & ~kKnownFlags) != 0) {
      throw ZipError(fmt::format("zip entry '{}' uses zip features PyTorch's archives do not "
                                 "(general-purpose flags 0x{:04x})",
                                 name, flags));
    }
    if (method != 0 || compressed != length) {
      throw ZipError(fmt::format("zip entry '{}' is compressed (method {}); PyTorch's archives "
                                 "store their entries uncompressed",
                                 name, method));
    }
    if (!b.has(local, kLocalHeaderBytes) || b.u32(local) != kLocalHeaderSignature) {
      throw ZipError(fmt::format("zip entry '{}': no local header at offset {}", name, local));
    }
    const uint64_t local_name_len = b.u16(local + 26), local_extra_len = b.u16(local + 28);
    const uint64_t data_offset = local + kLocalHeaderBytes + local_name_len + local_extra_len;
    if (local_name_len != name_len || !b.has(local + kLocalHeaderBytes, local_name_len) ||
        b.text(local + kLocalHeaderBytes, local_name_len) != name) {
      throw ZipError(fmt::format("zip entry '{}': its local header names another entry", name));
    }
    // The bytes of an entry lie before the central directory.
    if (data_offset > d.offset || length > d.offset - data_offset) {
      throw ZipError(fmt::format("zip entry '{}': its {} bytes at offset {} run past the entries' "
                                 "area (the archive is cut or crafted)",
                                 name, length, data_offset));
    }
    out.entries.push_back(ZipEntry{name, length, data_offset});
    at += header_len;
  }
  // Names compared without case, as miniz (LibTorch's zip reader) looks them up: "data.pkl" and
  // "DATA.PKL" would be one entry to it, and which one it reads is not this reader's choice.
  for (const ZipEntry& e : out.entries) {
    std::string folded = e.name;
    for (char& c : folded) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!names.insert(std::move(folded)).second) {
      throw ZipError(fmt::format("zip entry '{}' appears twice (names are compared without case)",
                                 e.name));
    }
  }
  if (at != end) {
    throw ZipError(fmt::format("the zip central directory holds {} bytes after its {} entries",
                               end - at, d.entries));
  }
  return out;
}

}  // namespace trainpack
