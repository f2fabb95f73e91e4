// CRC-32C (utils/crc32c.h): both implementations (the portable table code and the SSE4.2 one)
// against the published check values and against a bit-at-a-time reference on random buffers of
// many lengths and alignments, including the block sizes where the SSE4.2 code combines its
// three streams.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "trainpack/utils/crc32c.h"

namespace trainpack {
namespace crc32c_test {

using Extend = uint32_t (*)(uint32_t, const void*, size_t);

// The definition, one bit at a time: the oracle.
uint32_t reference(uint32_t crc, const unsigned char* p, size_t n) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

struct Impl {
  const char* name;
  Extend extend;
};

std::vector<Impl> implementations() {
  std::vector<Impl> out = {{"portable", crc32c::extend_portable}, {"extend", crc32c::extend}};
  if (crc32c::hardware_available()) out.push_back({"hardware", crc32c::extend_hardware});
  return out;
}

TEST(Crc32c, CheckValuesOfEveryImplementation) {
  // "123456789" is the CRC catalogue's check value; the 32-byte buffers are RFC 3720's (iSCSI)
  // examples, B.4.
  const std::string digits = "123456789";
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<unsigned char>(i);
    dec[i] = static_cast<unsigned char>(31 - i);
  }
  for (const Impl& impl : implementations()) {
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(impl.extend(0, digits.data(), digits.size()), 0xE3069283u);
    EXPECT_EQ(impl.extend(0, "", 0), 0u);
    EXPECT_EQ(impl.extend(0, zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(impl.extend(0, ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(impl.extend(0, inc.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(impl.extend(0, dec.data(), 32), 0x113FDB5Cu);
  }
}

TEST(Crc32c, TheHardwarePathIsUsedWhereTheCpuHasIt) {
#if defined(__x86_64__)
  EXPECT_EQ(crc32c::hardware_available(), __builtin_cpu_supports("sse4.2") != 0);
#else
  EXPECT_FALSE(crc32c::hardware_available());
#endif
}

TEST(Crc32c, RandomBuffersOfManyLengthsAndAlignmentsMatchTheReference) {
  std::mt19937 rng(20240613);
  std::vector<unsigned char> buffer(3 * 8192 * 2 + 3 * 256 * 3 + 64);
  for (auto& b : buffer) b = static_cast<unsigned char>(rng());
  // Around every boundary of the SSE4.2 code: 8-byte words, 3 x 256-byte and 3 x 8192-byte
  // blocks, and their sums; plus random lengths.
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 70; ++n) lengths.push_back(n);
  for (size_t base : {size_t{3 * 256}, size_t{2 * 3 * 256}, size_t{3 * 8192},
                      size_t{3 * 8192 + 3 * 256}, size_t{2 * 3 * 8192 + 2 * 3 * 256}}) {
    for (size_t d = 0; d <= 9; ++d) {
      lengths.push_back(base + d);
      lengths.push_back(base - d);
    }
  }
  std::uniform_int_distribution<size_t> any_length(0, buffer.size() - 64);
  for (int i = 0; i < 10; ++i) lengths.push_back(any_length(rng));
  const auto impls = implementations();
  const std::vector<size_t> all_offsets = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const std::vector<size_t> some_offsets = {0, 1, 3, 5, 8, 13};  // the long ones: time
  for (const size_t length : lengths) {
    for (const size_t offset : length <= 70 ? all_offsets : some_offsets) {
      const unsigned char* p = buffer.data() + offset;
      const uint32_t start = offset % 2 == 0 ? 0 : static_cast<uint32_t>(rng());
      const uint32_t expected = reference(start, p, length);
      for (const Impl& impl : impls) {
        ASSERT_EQ(impl.extend(start, p, length), expected)
            << impl.name << ": length " << length << ", offset " << offset << ", start " << start;
      }
    }
  }
}

TEST(Crc32c, ExtendingPieceByPieceGivesTheWholeCrc) {
  std::mt19937 rng(7);
  std::vector<unsigned char> data(100000);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  const uint32_t whole = reference(0, data.data(), data.size());
  std::uniform_int_distribution<size_t> piece(0, 30000);
  for (const Impl& impl : implementations()) {
    uint32_t crc = 0;
    size_t pos = 0;
    while (pos < data.size()) {
      const size_t n = std::min(piece(rng), data.size() - pos);
      crc = impl.extend(crc, data.data() + pos, n);
      pos += n;
    }
    EXPECT_EQ(crc, whole) << impl.name;
  }
}

}  // namespace crc32c_test
}  // namespace trainpack
