// Fuzzes the checkpoint reader (decode_checkpoint: the trailer, the zip directory, the pickle's
// lengths, LibTorch's unpickler, the storage and tensor bounds). The input is an archive without
// trainpack's trailer; the fuzzer appends a valid one (anyone can compute a CRC-32C), so that the
// mutations reach what lies behind the checksum. Every bad input must end in a CheckpointError.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/crc32c.h"
#include "trainpack/utils/logger.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    trainpack::logger::set_level(trainpack::logger::Level::kError);
    return true;
  }();
  (void)quiet;
  std::vector<char> file(reinterpret_cast<const char*>(data),
                         reinterpret_cast<const char*>(data) + size);
  // The zip end record's comment length is set to the trailer's, as the writer does.
  const std::string head = "trainpack-checkpoint 2 entries=1 crc32c=";
  if (file.size() >= 2) {
    const size_t comment = head.size() + 8;
    file[file.size() - 2] = static_cast<char>(comment & 0xff);
    file[file.size() - 1] = static_cast<char>(comment >> 8);
  }
  const uint32_t crc = trainpack::crc32c::value(file.data(), file.size());
  const std::string trailer = head + fmt::format("{:08x}", crc);
  file.insert(file.end(), trailer.begin(), trailer.end());
  try {
    const trainpack::TensorMap tensors = trainpack::decode_checkpoint(file, "fuzz/model-1.data");
    // Everything decoded is readable: touch every element.
    for (const auto& [name, t] : tensors) {
      if (t.numel() > 0 && t.numel() < (1 << 20)) (void)t.sum();
    }
  } catch (const trainpack::CheckpointError&) {
  }
  return 0;
}
