// CRC-32C (Castagnoli, the polynomial 0x1EDC6F41, reflected 0x82F63B78), as TFRecord files (the
// event files TensorBoard reads) checksum their records and checkpoints their data files. Two
// implementations giving the same values, chosen once at run time: SSE4.2's `crc32` instruction
// on x86-64, table-driven code elsewhere. Why it is written by hand, and how:
// docs/architecture.md, "CRC-32C".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trainpack {
namespace crc32c {

// Continues a CRC over `data` from the CRC of the bytes before it (0 to start):
// extend(extend(0, a), b) == value(a + b). value("123456789") == 0xE3069283.
uint32_t extend(uint32_t crc, const void* data, size_t size);
inline uint32_t value(const void* data, size_t size) { return extend(0, data, size); }
inline uint32_t value(std::string_view s) { return extend(0, s.data(), s.size()); }

// The two implementations, for tests and benchmarks (extend() picks one):
// extend_portable() runs everywhere; extend_hardware() uses SSE4.2 and may only be called when
// hardware_available() (an x86-64 CPU with SSE4.2); elsewhere it is extend_portable().
uint32_t extend_portable(uint32_t crc, const void* data, size_t size);
uint32_t extend_hardware(uint32_t crc, const void* data, size_t size);
bool hardware_available();

// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 (a CRC of data that itself
// holds CRCs is then not degenerate).
constexpr uint32_t kMaskDelta = 0xa282ead8u;
constexpr uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
constexpr uint32_t unmask(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace crc32c
}  // namespace trainpack
