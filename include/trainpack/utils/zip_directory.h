// The entries of a zip archive held in memory, read from its central directory with every field
// checked against the archive's bounds: what the checkpoint reader (utils/checkpoint.h) knows of
// a data file before LibTorch's unpickler is given it. Only what PyTorch's writer makes is
// accepted: stored entries (method 0), sizes and offsets in the classic fields or zip64's, no
// flags but a data descriptor and UTF-8 names, names unique without case (as miniz, LibTorch's
// zip reader, looks them up), the end record where miniz finds it, one disk. Anything else, or an
// offset or size outside the archive, is a ZipError naming the entry and field (zip's APPNOTE
// 6.3.x, sections 4.3.7, 4.3.12, 4.3.14-16 and 4.5.3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainpack {

// A zip archive that cannot be read: what() says what is wrong, naming the entry when one is.
class ZipError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One stored entry: its name, its size, and where its bytes begin in the archive
// (data_offset + size <= the archive's size holds for every entry returned).
struct ZipEntry {
  std::string name;
  uint64_t size = 0;
  uint64_t data_offset = 0;
};

struct ZipDirectory {
  std::vector<ZipEntry> entries;  // in central-directory order

  // The entry named `name`, or nullptr.
  const ZipEntry* find(const std::string& name) const;
};

// Reads the central directory of the archive `data[0, size)`; the archive may be followed by
// nothing but its comment (the end record's comment length must reach the end exactly). Throws
// ZipError.
ZipDirectory read_zip_directory(const char* data, size_t size);

}  // namespace trainpack
