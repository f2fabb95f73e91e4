// Test support: PNG and JPEG files written with libpng and libjpeg, in every colour type and bit
// depth the decoders take, for the tests of trainpack/utils/image_decode.h. Its source compiles as
// a unit of its own (libjpeg's headers define macros such as LOCAL and GLOBAL).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainpack {
namespace testing {

// PNG's colour types (the values of the IHDR field).
enum class PngColour { kGrey = 0, kRGB = 2, kPalette = 3, kGreyAlpha = 4, kRGBA = 6 };

struct TestPng {
  uint32_t width = 1;
  uint32_t height = 1;
  PngColour colour = PngColour::kRGB;
  int bit_depth = 8;  // 1, 2, 4, 8 or 16, as PNG allows for the colour type
  bool interlaced = false;
  // Row-major, interleaved samples (palette: indices), each within the bit depth.
  std::vector<uint16_t> samples;
  // kPalette: the palette's RGB entries.
  std::vector<uint8_t> palette_rgb;
  // tRNS: kPalette: one alpha per palette entry (may be shorter than the palette); kGrey: one
  // value; kRGB: three values (the transparent colour). Empty: no tRNS chunk.
  std::vector<uint16_t> transparency;
};

// The PNG file of `png`. Throws std::runtime_error when libpng refuses it.
std::string encode_test_png(const TestPng& png);

struct TestJpeg {
  uint32_t width = 1;
  uint32_t height = 1;
  int components = 3;            // 1 grey, 3 RGB (stored as YCbCr), 4 CMYK (stored as given)
  std::vector<uint8_t> samples;  // row-major, interleaved
  int quality = 90;
  bool progressive = false;  // jpeg_simple_progression
  bool adobe_marker = true;  // CMYK: libjpeg's default Adobe APP14 marker (off: none written)
};

// The JPEG file of `jpeg` (JDCT_ISLOW, libjpeg's defaults otherwise). Throws std::runtime_error
// when libjpeg refuses it.
std::string encode_test_jpeg(const TestJpeg& jpeg);

}  // namespace testing
}  // namespace trainpack
