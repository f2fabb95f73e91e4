#include "trainpack/utils/npz.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>

#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/host_read.h"

namespace trainpack {
namespace {

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npz.cpp writes little-endian descriptors and assumes a little-endian host"
#endif

constexpr size_t kAlign = 64;                           // numpy's ARRAY_ALIGN
constexpr uint64_t kMax32 = 0xffffffffu;                // beyond this the zip needs ZIP64
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01
constexpr uint16_t kDosTime = 0;

const char* descr_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "<f4";
    case at::kDouble:
      return "<f8";
    case at::kHalf:
      return "<f2";
    case at::kChar:
      return "|i1";
    case at::kByte:
      return "|u1";
    case at::kShort:
      return "<i2";
    case at::kInt:
      return "<i4";
    case at::kLong:
      return "<i8";
    case at::kBool:
      return "|b1";
    default:
      return nullptr;
  }
}

// `what` names the array in messages ("array 'x'" or "the tensor").
at::Tensor prepare(const at::Tensor& tensor, const std::string& fn, const std::string& what) {
  if (!tensor.defined()) throw std::invalid_argument(fn + ": " + what + " is undefined");
  if (descr_of(tensor.scalar_type()) == nullptr) {
    throw std::invalid_argument(fn + ": " + what + " has unsupported dtype " +
                                std::string(c10::toString(tensor.scalar_type())) +
                                " (supported: float32, float64, float16, int8, uint8, int16, "
                                "int32, int64, bool)");
  }
  return to_host(tensor);
}

// The header of a CPU tensor whose dtype is supported; its length is a multiple of kAlign.
std::string npy_header(const at::Tensor& t) {
  std::string dict = "{'descr': '";
  dict += descr_of(t.scalar_type());
  dict += "', 'fortran_order': False, 'shape': (";
  const auto sizes = t.sizes();
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i > 0) dict += ", ";
    dict += std::to_string(sizes[i]);
  }
  if (sizes.size() == 1) dict += ",";
  dict += "), }";
  // magic (6) + version (2) + header length (2) + dict + padding + '\n'
  const size_t unpadded = 10 + dict.size() + 1;
  const size_t pad = (kAlign - unpadded % kAlign) % kAlign;
  const size_t hlen = dict.size() + pad + 1;
  if (hlen > 0xffff) throw std::invalid_argument("encode_npy: the shape is too long for NPY 1.0");
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(hlen & 0xff);
  out += static_cast<char>((hlen >> 8) & 0xff);
  out += dict;
  out.append(pad, ' ');
  out += '\n';
  return out;
}

size_t nbytes_of(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

uint32_t crc_update(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

void put16(std::string& s, uint32_t v) {
  s += static_cast<char>(v & 0xff);
  s += static_cast<char>((v >> 8) & 0xff);
}

void put32(std::string& s, uint64_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

void check_name(const std::string& name) {
  if (name.empty()) throw std::invalid_argument("write_npz: an array name is empty");
  const std::string quoted = "'" + name + "'";
  if (name.find('\0') != std::string::npos) {
    std::string shown;  // what() stops at a NUL: show it as \0
    for (char c : name) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
    throw std::invalid_argument("write_npz: array name '" + shown + "' contains a NUL byte");
  }
  if (name[0] == '/' || name[0] == '\\') {
    throw std::invalid_argument("write_npz: array name " + quoted +
                                " starts with a path separator (it could escape a directory)");
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find_first_of("/\\", start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0) {
      throw std::invalid_argument("write_npz: array name " + quoted +
                                  " has a '..' component (it could escape a directory)");
    }
    start = end + 1;
  }
}

struct Entry {
  std::string name;  // "<key>.npy"
  std::string header;
  at::Tensor data;
  uint64_t size = 0;
  uint32_t crc = 0;
  uint64_t offset = 0;
  bool utf8 = false;
};

std::string local_header(const Entry& e) {
  std::string s;
  put32(s, 0x04034b50);
  put16(s, 20);                  // version needed: 2.0
  put16(s, e.utf8 ? 0x800 : 0);  // bit 11: the name is UTF-8
  put16(s, 0);                   // stored
  put16(s, kDosTime);
  put16(s, kDosDate);
  put32(s, e.crc);
  put32(s, e.size);  // compressed size
  put32(s, e.size);
  put16(s, static_cast<uint32_t>(e.name.size()));
  put16(s, 0);  // extra field length
  s += e.name;
  return s;
}

std::string central_header(const Entry& e) {
  std::string s;
  put32(s, 0x02014b50);
  put16(s, 20);  // version made by: 2.0, MS-DOS attributes
  put16(s, 20);
  put16(s, e.utf8 ? 0x800 : 0);
  put16(s, 0);
  put16(s, kDosTime);
  put16(s, kDosDate);
  put32(s, e.crc);
  put32(s, e.size);
  put32(s, e.size);
  put16(s, static_cast<uint32_t>(e.name.size()));
  put16(s, 0);  // extra
  put16(s, 0);  // comment
  put16(s, 0);  // disk number start
  put16(s, 0);  // internal attributes
  put32(s, 0);  // external attributes
  put32(s, e.offset);
  s += e.name;
  return s;
}

// Writes the zip through an AtomicFileWriter (a new temporary file, fsync, rename).
void write_file(AtomicFileWriter& file, const std::vector<Entry>& entries,
                const std::string& central, const std::string& end) {
  for (const Entry& e : entries) {
    file.write(local_header(e));
    file.write(e.header);
    file.write(e.data.data_ptr(), nbytes_of(e.data));
  }
  file.write(central);
  file.write(end);
  file.commit();
}

}  // namespace

std::string encode_npy(const at::Tensor& tensor) {
  const at::Tensor t = prepare(tensor, "encode_npy", "the tensor");
  std::string out = npy_header(t);
  const size_t n = nbytes_of(t);
  if (n > 0) out.append(static_cast<const char*>(t.data_ptr()), n);
  return out;
}

void write_npz(const std::string& path,
               const std::vector<std::pair<std::string, at::Tensor>>& arrays) {
  if (path.empty()) throw std::invalid_argument("write_npz: the path is empty");
  if (arrays.size() > 0xffff) {
    throw std::invalid_argument("write_npz: " + std::to_string(arrays.size()) + " arrays for " +
                                path + "; more than 65535 needs ZIP64, which is not supported");
  }
  // Check and prepare everything before touching the file system.
  std::set<std::string> seen;
  std::vector<Entry> entries;
  entries.reserve(arrays.size());
  uint64_t offset = 0;
  for (const auto& [key, tensor] : arrays) {
    check_name(key);
    if (!seen.insert(key).second) {
      throw std::invalid_argument("write_npz: duplicate array name '" + key + "'");
    }
    Entry e;
    e.name = key + ".npy";
    if (e.name.size() > 0xffff) {
      throw std::invalid_argument("write_npz: array name '" + key.substr(0, 64) +
                                  "...' is too long for a zip entry");
    }
    e.utf8 = std::any_of(e.name.begin(), e.name.end(),
                         [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
    e.data = prepare(tensor, "write_npz", "array '" + key + "'");
    e.header = npy_header(e.data);
    e.size = e.header.size() + nbytes_of(e.data);
    e.offset = offset;
    if (e.size >= kMax32 || offset >= kMax32) {
      throw std::invalid_argument("write_npz: " + path + " would reach 4 GiB at array '" + key +
                                  "'; ZIP64 is not supported");
    }
    e.crc = crc_update(0, e.header.data(), e.header.size());
    e.crc = crc_update(e.crc, e.data.data_ptr(), nbytes_of(e.data));
    offset += 30 + e.name.size() + e.size;
    entries.push_back(std::move(e));
  }
  std::string central;
  for (const Entry& e : entries) central += central_header(e);
  if (offset >= kMax32 || offset + central.size() >= kMax32) {
    throw std::invalid_argument("write_npz: " + path +
                                " would reach 4 GiB; ZIP64 is not supported");
  }
  std::string end;
  put32(end, 0x06054b50);
  put16(end, 0);  // this disk
  put16(end, 0);  // disk with the central directory
  put16(end, static_cast<uint32_t>(entries.size()));
  put16(end, static_cast<uint32_t>(entries.size()));
  put32(end, central.size());
  put32(end, offset);
  put16(end, 0);  // comment length

  try {
    AtomicFileWriter file(path);
    write_file(file, entries, central, end);
    fsync_directory(parent_directory(path));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("write_npz: ") + e.what());
  }
}

}  // namespace trainpack
