// decode_image and read_image (trainpack/utils/image_decode.h): PNGs of every colour type and bit
// depth, pixel for pixel; JPEGs against Pillow's decoding of the same file; the channel
// conversions and layouts; and every input that does not decode, by its message.
#include "trainpack/utils/image_decode.h"
#include "support/command.h"
#include "support/image_files.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainpack/utils/logger.h"

namespace image_decode_test {

namespace fs = std::filesystem;
using trainpack::decode_image;
using trainpack::ExtensionMismatch;
using trainpack::ImageChannels;
using trainpack::ImageDecodeError;
using trainpack::ImageDecodeOptions;
using trainpack::ImageFormat;
using trainpack::ImageLayout;
using trainpack::read_image;
using trainpack::testing::encode_test_jpeg;
using trainpack::testing::encode_test_png;
using trainpack::testing::PngColour;
using trainpack::testing::TestJpeg;
using trainpack::testing::TestPng;

class ImageDecodeTest : public trainpack::testing::TempDirTest {};

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

at::Tensor decode(const std::string& bytes, const ImageDecodeOptions& options) {
  return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem.img",
                      options);
}

ImageDecodeOptions keep_hwc() {
  return ImageDecodeOptions().channels(ImageChannels::kKeep).layout(ImageLayout::kHWC);
}

std::vector<uint8_t> values(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<uint8_t>(c.data_ptr<uint8_t>(), c.data_ptr<uint8_t>() + c.numel());
}

std::vector<uint8_t> values(const std::string& bytes) {
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

// A deterministic spread of samples below `limit`.
std::vector<uint16_t> pattern(size_t n, uint32_t limit, uint32_t seed = 1) {
  std::vector<uint16_t> out(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    out[i] = static_cast<uint16_t>((x >> 8) % limit);
  }
  return out;
}

// A smooth RGB/grey/CMYK picture (JPEG compresses it with few artefacts), with some edges.
std::vector<uint8_t> picture(uint32_t width, uint32_t height, int components) {
  std::vector<uint8_t> out;
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      for (int c = 0; c < components; ++c) {
        const uint32_t v = (x * (2 + c) + y * (3 + 2 * c) + ((x / 8 + y / 8) % 2) * 60) % 256;
        out.push_back(static_cast<uint8_t>(v));
      }
    }
  }
  return out;
}

// Expects `f` to throw an ImageDecodeError for `path` whose message holds every one of `parts`.
template <typename F>
void expect_decode_error(F&& f, const std::string& path, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no ImageDecodeError for " << path;
  } catch (const ImageDecodeError& e) {
    EXPECT_EQ(e.path(), path);
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << p << " in: " << what;
  }
}

// PNG's CRC-32 (zlib's polynomial), for patching a chunk.
uint32_t png_crc(const std::string& s, size_t begin, size_t end) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = begin; i < end; ++i) {
    crc ^= static_cast<unsigned char>(s[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put_be32(std::string* s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*s)[at + i] = static_cast<char>((v >> (24 - 8 * i)) & 0xff);
}

// /usr/bin/python3 (where Debian's python3-pil is) or python3 with PIL; "" when there is none.
std::string python_with_pil() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    const std::string cmd = std::string(py) + " -c \"import PIL.Image\" >/dev/null 2>&1 </dev/null";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

// The bytes of Pillow's Image.open(path), converted to `mode` when it is not empty.
std::string pillow_pixels(const std::string& py, const fs::path& dir, const fs::path& path,
                          const std::string& mode) {
  const fs::path script = dir / "pil_decode.py";
  const fs::path out = dir / "pil_pixels.raw";
  std::ofstream(script) << "import sys\n"
                           "from PIL import Image\n"
                           "im = Image.open(sys.argv[1])\n"
                           "if sys.argv[3]: im = im.convert(sys.argv[3])\n"
                           "open(sys.argv[2], 'wb').write(im.tobytes())\n";
  const auto [text, rc] =
      trainpack::testing::run_command(py + " " + script.string() + " " + path.string() + " " +
                                      out.string() + " '" + mode + "' 2>&1 </dev/null");
  EXPECT_EQ(rc, 0) << text;
  return read_bytes(out);
}

// ---- format and PNG pixels ----

TEST(ImageDecode, SniffsByMagicBytes) {
  const std::string png = encode_test_png({1, 1, PngColour::kGrey, 8, false, {7}, {}, {}});
  const std::string jpeg = encode_test_jpeg({1, 1, 1, {7}});
  auto sniff = [](const std::string& s) {
    return trainpack::sniff_image_format(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  EXPECT_EQ(sniff(png), ImageFormat::kPNG);
  EXPECT_EQ(sniff(jpeg), ImageFormat::kJPEG);
  EXPECT_EQ(sniff(png.substr(0, 7)), ImageFormat::kUnknown);
  EXPECT_EQ(sniff(jpeg.substr(0, 2)), ImageFormat::kUnknown);
  EXPECT_EQ(sniff("<html>"), ImageFormat::kUnknown);
  EXPECT_EQ(sniff(""), ImageFormat::kUnknown);
}

TEST(ImageDecode, PngRgbInEveryLayout) {
  TestPng desc{5, 3, PngColour::kRGB, 8, false, pattern(5 * 3 * 3, 256), {}, {}};
  const std::string png = encode_test_png(desc);
  const at::Tensor hwc = decode(png, keep_hwc());
  EXPECT_EQ(hwc.scalar_type(), at::kByte);
  EXPECT_EQ(hwc.sizes(), (std::vector<int64_t>{3, 5, 3}));
  EXPECT_TRUE(hwc.is_contiguous());
  EXPECT_EQ(values(hwc), std::vector<uint8_t>(desc.samples.begin(), desc.samples.end()));
  // The defaults: RGB, [C, H, W].
  const at::Tensor chw = decode(png, {});
  EXPECT_EQ(chw.sizes(), (std::vector<int64_t>{3, 3, 5}));
  EXPECT_TRUE(chw.is_contiguous());
  EXPECT_TRUE(at::equal(chw, hwc.permute({2, 0, 1})));
}

// Every colour type at every bit depth PNG allows, decoded with kKeep: samples of fewer than 8 bits
// scaled to 0..255, 16 bits to 8 with exact rounding.
TEST(ImageDecode, PngEveryColourTypeAndBitDepth) {
  struct Case {
    PngColour colour;
    int depth;
    int channels;
  };
  const std::vector<Case> cases = {
      {PngColour::kGrey, 1, 1},    {PngColour::kGrey, 2, 1},      {PngColour::kGrey, 4, 1},
      {PngColour::kGrey, 8, 1},    {PngColour::kGrey, 16, 1},     {PngColour::kRGB, 8, 3},
      {PngColour::kRGB, 16, 3},    {PngColour::kGreyAlpha, 8, 2}, {PngColour::kGreyAlpha, 16, 2},
      {PngColour::kRGBA, 8, 4},    {PngColour::kRGBA, 16, 4},     {PngColour::kPalette, 1, 3},
      {PngColour::kPalette, 2, 3}, {PngColour::kPalette, 4, 3},   {PngColour::kPalette, 8, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "colour type " << static_cast<int>(c.colour) << ", bit depth " << c.depth);
    const uint32_t width = 7, height = 5;  // rows of 1, 2, 4 bits end inside a byte
    const bool palette = c.colour == PngColour::kPalette;
    const int stored = palette ? 1 : c.channels;
    TestPng desc{width,   height, c.colour,
                 c.depth, false,  pattern(size_t{width} * height * stored, 1u << c.depth, c.depth),
                 {},      {}};
    if (c.depth == 16) {  // include both ends and the halfway points of the rounding
      desc.samples[0] = 0;
      desc.samples[1] = 65535;
      desc.samples[2] = 128;
      desc.samples[3] = 129;
      desc.samples[4] = 32767;
    }
    if (palette) {
      for (uint32_t i = 0; i < (1u << c.depth); ++i) {
        desc.palette_rgb.insert(desc.palette_rgb.end(),
                                {static_cast<uint8_t>(i * 3), static_cast<uint8_t>(255 - i),
                                 static_cast<uint8_t>(i * 7 % 256)});
      }
    }
    std::vector<uint8_t> expected;
    for (uint16_t v : desc.samples) {
      if (palette) {
        for (int k = 0; k < 3; ++k) expected.push_back(desc.palette_rgb[3 * v + k]);
      } else if (c.depth == 16) {
        expected.push_back(static_cast<uint8_t>((uint32_t{v} * 255 + 32767) / 65535));
      } else {
        expected.push_back(static_cast<uint8_t>(v * 255 / ((1u << c.depth) - 1)));
      }
    }
    const at::Tensor t = decode(encode_test_png(desc), keep_hwc());
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{height, width, c.channels}));
    EXPECT_EQ(values(t), expected);
  }
}

TEST(ImageDecode, PngTransparencyBecomesAlpha) {
  // Grey with a transparent value: grey+alpha.
  TestPng grey{3, 1, PngColour::kGrey, 8, false, {10, 20, 10}, {}, {20}};
  EXPECT_EQ(values(decode(encode_test_png(grey), keep_hwc())),
            (std::vector<uint8_t>{10, 255, 20, 0, 10, 255}));
  // 16-bit grey with a transparent value.
  TestPng grey16{2, 1, PngColour::kGrey, 16, false, {65535, 1000}, {}, {1000}};
  EXPECT_EQ(values(decode(encode_test_png(grey16), keep_hwc())),
            (std::vector<uint8_t>{255, 255, 4, 0}));
  // RGB with a transparent colour: RGBA.
  TestPng rgb{2, 1, PngColour::kRGB, 8, false, {1, 2, 3, 4, 5, 6}, {}, {4, 5, 6}};
  EXPECT_EQ(values(decode(encode_test_png(rgb), keep_hwc())),
            (std::vector<uint8_t>{1, 2, 3, 255, 4, 5, 6, 0}));
  // A palette with alphas for its first entries: RGBA (the others opaque).
  TestPng pal{3,     1,         PngColour::kPalette,         2,
              false, {0, 1, 2}, {9, 8, 7, 6, 5, 4, 3, 2, 1}, {0, 128}};
  const at::Tensor t = decode(encode_test_png(pal), keep_hwc());
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(values(t), (std::vector<uint8_t>{9, 8, 7, 0, 6, 5, 4, 128, 3, 2, 1, 255}));
}

TEST(ImageDecode, PngInterlaced) {
  TestPng rgba{13, 11, PngColour::kRGBA, 8, true, pattern(13 * 11 * 4, 256, 5), {}, {}};
  EXPECT_EQ(values(decode(encode_test_png(rgba), keep_hwc())),
            std::vector<uint8_t>(rgba.samples.begin(), rgba.samples.end()));
  TestPng grey{9, 6, PngColour::kGrey, 16, true, pattern(9 * 6, 65536, 6), {}, {}};
  std::vector<uint8_t> expected;
  for (uint16_t v : grey.samples) expected.push_back((uint32_t{v} * 255 + 32767) / 65535);
  EXPECT_EQ(values(decode(encode_test_png(grey), keep_hwc())), expected);
  TestPng bits{10, 9, PngColour::kGrey, 1, true, pattern(10 * 9, 2, 7), {}, {}};
  expected.clear();
  for (uint16_t v : bits.samples) expected.push_back(v * 255);
  EXPECT_EQ(values(decode(encode_test_png(bits), keep_hwc())), expected);
}

uint8_t luma(int r, int g, int b) { return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16; }

TEST(ImageDecode, ChannelConversions) {
  const std::vector<uint16_t> px = {10, 200, 30, 40, 0, 0, 5, 255, 255, 255, 255, 7};
  const std::string rgba = encode_test_png({3, 1, PngColour::kRGBA, 8, false, px, {}, {}});
  auto hwc = [](ImageChannels channels) {
    return ImageDecodeOptions().layout(ImageLayout::kHWC).channels(channels);
  };
  EXPECT_EQ(values(decode(rgba, hwc(ImageChannels::kRGB))),
            (std::vector<uint8_t>{10, 200, 30, 0, 0, 5, 255, 255, 255}));
  EXPECT_EQ(values(decode(rgba, hwc(ImageChannels::kGrey))),
            (std::vector<uint8_t>{luma(10, 200, 30), luma(0, 0, 5), 255}));
  EXPECT_EQ(luma(0, 0, 5), 1);  // rounded, as Pillow: 0.57
  EXPECT_EQ(values(decode(rgba, hwc(ImageChannels::kRGBA))),
            std::vector<uint8_t>(px.begin(), px.end()));

  const std::string grey = encode_test_png({2, 1, PngColour::kGrey, 8, false, {3, 250}, {}, {}});
  EXPECT_EQ(values(decode(grey, hwc(ImageChannels::kRGB))),
            (std::vector<uint8_t>{3, 3, 3, 250, 250, 250}));
  EXPECT_EQ(values(decode(grey, hwc(ImageChannels::kRGBA))),
            (std::vector<uint8_t>{3, 3, 3, 255, 250, 250, 250, 255}));
  EXPECT_EQ(values(decode(grey, hwc(ImageChannels::kGrey))), (std::vector<uint8_t>{3, 250}));

  const std::string ga =
      encode_test_png({2, 1, PngColour::kGreyAlpha, 8, false, {3, 9, 250, 0}, {}, {}});
  EXPECT_EQ(values(decode(ga, hwc(ImageChannels::kRGBA))),
            (std::vector<uint8_t>{3, 3, 3, 9, 250, 250, 250, 0}));
  EXPECT_EQ(values(decode(ga, hwc(ImageChannels::kRGB))),
            (std::vector<uint8_t>{3, 3, 3, 250, 250, 250}));
  EXPECT_EQ(values(decode(ga, hwc(ImageChannels::kGrey))), (std::vector<uint8_t>{3, 250}));

  const std::string rgb =
      encode_test_png({2, 1, PngColour::kRGB, 8, false, {1, 2, 3, 4, 5, 6}, {}, {}});
  EXPECT_EQ(values(decode(rgb, hwc(ImageChannels::kRGBA))),
            (std::vector<uint8_t>{1, 2, 3, 255, 4, 5, 6, 255}));

  // [C, H, W] of every conversion is the permutation of [H, W, C].
  const std::string big =
      encode_test_png({6, 4, PngColour::kRGBA, 8, false, pattern(96, 256), {}, {}});
  for (ImageChannels ch :
       {ImageChannels::kKeep, ImageChannels::kGrey, ImageChannels::kRGB, ImageChannels::kRGBA}) {
    const at::Tensor a = decode(big, ImageDecodeOptions().channels(ch).layout(ImageLayout::kHWC));
    const at::Tensor b = decode(big, ImageDecodeOptions().channels(ch).layout(ImageLayout::kCHW));
    EXPECT_TRUE(b.is_contiguous());
    EXPECT_TRUE(at::equal(b, a.permute({2, 0, 1})));
  }
}

// ---- JPEG ----

TEST(ImageDecode, JpegShapesAndCloseToTheSource) {
  for (int components : {1, 3}) {
    for (bool progressive : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << components << " components, progressive " << progressive);
      TestJpeg desc{40, 24, components, picture(40, 24, components), 95, progressive};
      const at::Tensor t = decode(encode_test_jpeg(desc), keep_hwc());
      EXPECT_EQ(t.scalar_type(), at::kByte);
      EXPECT_EQ(t.sizes(), (std::vector<int64_t>{24, 40, components}));
      const at::Tensor source = at::tensor(at::ArrayRef<uint8_t>(desc.samples)).view(t.sizes());
      const double error = (t.to(at::kFloat) - source.to(at::kFloat)).abs().mean().item<double>();
      EXPECT_LT(error, 8.0);
      EXPECT_EQ(decode(encode_test_jpeg(desc), {}).sizes(), (std::vector<int64_t>{3, 24, 40}));
    }
  }
}

// CMYK as Photoshop and Pillow store it (Adobe marker, inks inverted): R = C * K / 255 of the
// stored values; without the marker: R = (255 - C) * (255 - K) / 255. Flat colours at quality 100
// come back within a step or two of what was stored.
TEST(ImageDecode, JpegCmykToRgb) {
  const std::vector<uint8_t> cmyk = {200, 100, 30, 220};
  for (bool adobe : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "Adobe marker " << adobe);
    TestJpeg desc{16, 16, 4, {}, 100, false, adobe};
    for (int i = 0; i < 256; ++i) desc.samples.insert(desc.samples.end(), cmyk.begin(), cmyk.end());
    const at::Tensor t = decode(encode_test_jpeg(desc), keep_hwc());
    ASSERT_EQ(t.sizes(), (std::vector<int64_t>{16, 16, 3}));
    for (int c = 0; c < 3; ++c) {
      const double expected =
          adobe ? cmyk[c] * cmyk[3] / 255.0 : (255 - cmyk[c]) * (255 - cmyk[3]) / 255.0;
      EXPECT_NEAR(t[5][7][c].item<int>(), expected, 3.0) << "channel " << c;
    }
  }
}

// The same file through Pillow (same libjpeg-turbo, islow IDCT, fancy upsampling): equal pixels,
// and equal conversions to grey.
TEST_F(ImageDecodeTest, JpegAndPngEqualToPillow) {
  const std::string py = python_with_pil();
  if (py.empty()) GTEST_SKIP() << "python3 with PIL (Debian's python3-pil) is not installed";
  struct Case {
    std::string file;
    std::string bytes;
    std::string pil_mode;  // Pillow's convert() for the kKeep comparison ("" none)
  };
  std::vector<Case> cases = {
      {"baseline.jpg", encode_test_jpeg({61, 37, 3, picture(61, 37, 3), 85, false}), ""},
      {"progressive.jpg", encode_test_jpeg({61, 37, 3, picture(61, 37, 3), 85, true}), ""},
      {"grey.jpg", encode_test_jpeg({33, 20, 1, picture(33, 20, 1), 90, false}), ""},
      {"grey_progressive.jpg", encode_test_jpeg({33, 20, 1, picture(33, 20, 1), 90, true}), ""},
      {"cmyk.jpg", encode_test_jpeg({30, 18, 4, picture(30, 18, 4), 90, false}), "RGB"},
      {"rgba.png",
       encode_test_png({9, 7, PngColour::kRGBA, 8, false, pattern(9 * 7 * 4, 256, 3), {}, {}}), ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const fs::path path = dir() / c.file;
    write_bytes(path, c.bytes);
    const at::Tensor mine = read_image(path.string(), keep_hwc());
    EXPECT_EQ(values(mine), values(pillow_pixels(py, dir(), path, c.pil_mode)));
    const at::Tensor grey =
        read_image(path.string(),
                   ImageDecodeOptions().channels(ImageChannels::kGrey).layout(ImageLayout::kHWC));
    EXPECT_EQ(values(grey), values(pillow_pixels(py, dir(), path, "L")));
    const at::Tensor rgb =
        read_image(path.string(), ImageDecodeOptions().layout(ImageLayout::kHWC));
    EXPECT_EQ(values(rgb), values(pillow_pixels(py, dir(), path, "RGB")));
  }
}

// A CMYK JPEG that Pillow writes (inverted inks, Adobe marker), against Pillow's convert("RGB").
TEST_F(ImageDecodeTest, PillowsCmykJpegAsPillowConvertsIt) {
  const std::string py = python_with_pil();
  if (py.empty()) GTEST_SKIP() << "python3 with PIL (Debian's python3-pil) is not installed";
  const fs::path script = dir() / "cmyk.py";
  const fs::path jpeg = dir() / "pillow_cmyk.jpg";
  const fs::path rgb = dir() / "pillow_rgb.raw";
  std::ofstream(script) << "import sys\n"
                           "from PIL import Image\n"
                           "im = Image.new('CMYK', (37, 21))\n"
                           "im.putdata([((x * 7) % 256, (y * 12) % 256, (x * y) % 256, "
                           "(x * 5 + y * 3) % 256) for y in range(21) for x in range(37)])\n"
                           "im.save(sys.argv[1], quality=90)\n"
                           "back = Image.open(sys.argv[1])\n"
                           "assert back.mode == 'CMYK', back.mode\n"
                           "open(sys.argv[2], 'wb').write(back.convert('RGB').tobytes())\n";
  const auto [text, rc] = trainpack::testing::run_command(
      py + " " + script.string() + " " + jpeg.string() + " " + rgb.string() + " 2>&1 </dev/null");
  ASSERT_EQ(rc, 0) << text;
  const at::Tensor mine = read_image(jpeg.string(), ImageDecodeOptions().layout(ImageLayout::kHWC));
  ASSERT_EQ(mine.sizes(), (std::vector<int64_t>{21, 37, 3}));
  const std::string pil = read_bytes(rgb);
  ASSERT_EQ(pil.size(), static_cast<size_t>(mine.numel()));
  const at::Tensor theirs =
      at::tensor(at::ArrayRef<uint8_t>(values(pil))).view(mine.sizes()).to(at::kInt);
  EXPECT_LE((mine.to(at::kInt) - theirs).abs().max().item<int>(), 1);
}

// Several threads decode at once, each with its own libpng and libjpeg state.
TEST(ImageDecode, ThreadsDecodeAtOnce) {
  const std::string png =
      encode_test_png({48, 32, PngColour::kRGBA, 16, true, pattern(48 * 32 * 4, 65536, 9), {}, {}});
  const std::string jpeg = encode_test_jpeg({48, 32, 3, picture(48, 32, 3), 90, true});
  const std::string bad = png.substr(0, png.size() / 2);
  const at::Tensor png_once = decode(png, {});
  const at::Tensor jpeg_once = decode(jpeg, {});
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        if (!at::equal(decode(png, {}), png_once)) ++mismatches;
        if (!at::equal(decode(jpeg, {}), jpeg_once)) ++mismatches;
        try {
          decode(bad, {});
        } catch (const ImageDecodeError&) {
          ++errors;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 80);
}

// ---- what does not decode ----

TEST_F(ImageDecodeTest, TruncatedPngAndJpeg) {
  const std::string png =
      encode_test_png({64, 64, PngColour::kRGB, 8, false, pattern(64 * 64 * 3, 256), {}, {}});
  const std::string baseline = encode_test_jpeg({64, 64, 3, picture(64, 64, 3), 90, false});
  const std::string progressive = encode_test_jpeg({64, 64, 3, picture(64, 64, 3), 90, true});
  for (const auto& [name, bytes] : {std::pair<std::string, std::string>{"cut.png", png},
                                    {"cut.jpg", baseline},
                                    {"cut_progressive.jpg", progressive}}) {
    const fs::path path = dir() / name;
    write_bytes(path, bytes.substr(0, bytes.size() / 2));
    expect_decode_error([&] { read_image(path.string()); }, path.string(),
                        {"truncated", "download it again"});
    // Only the header: also truncated.
    write_bytes(path, bytes.substr(0, 40));
    expect_decode_error([&] { read_image(path.string()); }, path.string(), {"truncated"});
  }
}

// Every pixel is there, only the end is missing: a PNG without its IEND chunk decodes; a JPEG
// without its end-of-image marker is truncated (the marker is what tells a complete progressive
// JPEG from one cut between two scans).
TEST(ImageDecode, ImageWithoutItsEnd) {
  const std::string png =
      encode_test_png({16, 8, PngColour::kRGB, 8, false, pattern(16 * 8 * 3, 256), {}, {}});
  ASSERT_EQ(png.substr(png.size() - 8, 4), "IEND");
  EXPECT_TRUE(at::equal(decode(png.substr(0, png.size() - 12), {}), decode(png, {})));
  for (bool progressive : {false, true}) {
    const std::string jpeg = encode_test_jpeg({16, 8, 3, picture(16, 8, 3), 90, progressive});
    ASSERT_EQ(jpeg.substr(jpeg.size() - 2), "\xff\xd9");
    expect_decode_error([&] { decode(jpeg.substr(0, jpeg.size() - 2), {}); }, "mem.img",
                        {"truncated"});
    // Cut after a whole scan (before the next start-of-scan marker, FF DA), with an end marker.
    if (progressive) {
      const size_t second_scan = jpeg.find("\xff\xda", jpeg.find("\xff\xda") + 2);
      ASSERT_NE(second_scan, std::string::npos);
      EXPECT_EQ(decode(jpeg.substr(0, second_scan) + "\xff\xd9", {}).sizes(),
                (std::vector<int64_t>{3, 8, 16}));
      expect_decode_error([&] { decode(jpeg.substr(0, second_scan), {}); }, "mem.img",
                          {"truncated"});
    }
  }
}

TEST_F(ImageDecodeTest, CorruptPngAndJpeg) {
  std::string png =
      encode_test_png({32, 32, PngColour::kRGB, 8, false, pattern(32 * 32 * 3, 256), {}, {}});
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  for (size_t i = idat + 8; i < idat + 40; ++i) png[i] = static_cast<char>(png[i] ^ 0x5a);
  const fs::path png_path = dir() / "bad.png";
  write_bytes(png_path, png);
  expect_decode_error([&] { read_image(png_path.string()); }, png_path.string(),
                      {"PNG", "corrupt", "(IDAT: ", "replace the file"});
  // A JPEG whose start-of-frame says 0 components.
  std::string jpeg = encode_test_jpeg({8, 8, 3, picture(8, 8, 3), 90, false});
  const size_t sof = jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 9] = 0;
  const fs::path jpeg_path = dir() / "bad.jpg";
  write_bytes(jpeg_path, jpeg);
  expect_decode_error([&] { read_image(jpeg_path.string()); }, jpeg_path.string(),
                      {"JPEG", "corrupt", "replace the file"});
}

TEST_F(ImageDecodeTest, NeitherPngNorJpeg) {
  const fs::path html = dir() / "cat.jpg";
  write_bytes(html, "<html><body>404 Not Found</body></html>\n");
  expect_decode_error(
      [&] { read_image(html.string()); }, html.string(),
      {"neither PNG nor JPEG", "'<html><b...'", "HTML page", "convert it to PNG or JPEG"});
  const fs::path gif = dir() / "anim.png";
  write_bytes(gif, std::string("GIF89a\x01\x00\x01\x00", 10));
  expect_decode_error([&] { read_image(gif.string()); }, gif.string(),
                      {"47 49 46 38 39 61 01 00 ...", "a GIF image"});
  expect_decode_error([&] { decode(std::string("\x00\x01", 2), {}); }, "mem.img",
                      {"neither PNG nor JPEG", "00 01 '..'"});
}

// A small file that claims a 30000 x 30000 image is refused from its header, with the limit and
// how to raise it; as is a real image over a lower limit.
TEST_F(ImageDecodeTest, OverThePixelLimit) {
  std::string png = encode_test_png({1, 1, PngColour::kRGB, 8, false, {1, 2, 3}, {}, {}});
  ASSERT_EQ(png.substr(12, 4), "IHDR");
  put_be32(&png, 16, 30000);
  put_be32(&png, 20, 30000);
  put_be32(&png, 29, png_crc(png, 12, 29));
  const fs::path png_path = dir() / "bomb.png";
  write_bytes(png_path, png);
  expect_decode_error([&] { read_image(png_path.string()); }, png_path.string(),
                      {"30000x30000 = 900000000 pixels", "limit of 89478485 pixels",
                       "ImageDecodeOptions().max_pixels(n)"});

  std::string jpeg = encode_test_jpeg({1, 1, 3, {1, 2, 3}, 90, false});
  const size_t sof = jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = jpeg[sof + 7] = static_cast<char>(30000 >> 8);
  jpeg[sof + 6] = jpeg[sof + 8] = static_cast<char>(30000 & 0xff);
  const fs::path jpeg_path = dir() / "bomb.jpg";
  write_bytes(jpeg_path, jpeg);
  expect_decode_error([&] { read_image(jpeg_path.string()); }, jpeg_path.string(),
                      {"JPEG", "30000x30000 = 900000000 pixels", "max_pixels(n)"});

  const std::string small =
      encode_test_png({20, 10, PngColour::kGrey, 8, false, pattern(200, 256), {}, {}});
  expect_decode_error([&] { decode(small, ImageDecodeOptions().max_pixels(199)); }, "mem.img",
                      {"20x10 = 200 pixels", "limit of 199 pixels"});
  EXPECT_EQ(decode(small, ImageDecodeOptions().max_pixels(200)).numel(), 3 * 200);
  EXPECT_EQ(decode(small, ImageDecodeOptions().max_pixels(0)).numel(), 3 * 200);
}

TEST_F(ImageDecodeTest, MissingUnreadableAndEmptyFiles) {
  const fs::path missing = dir() / "missing.png";
  expect_decode_error([&] { read_image(missing.string()); }, missing.string(),
                      {"No such file or directory", "check that the path exists"});
  expect_decode_error([&] { read_image(dir().string()); }, dir().string(),
                      {"directory", "regular file"});
  const fs::path empty = dir() / "empty.jpg";
  write_bytes(empty, "");
  expect_decode_error([&] { read_image(empty.string()); }, empty.string(),
                      {"empty (0 bytes)", "download it again"});
}

// Collects the warnings the logger writes while it lives.
class WarningLog {
 public:
  WarningLog() {
    id_ = trainpack::logger::add_sink([this](trainpack::logger::Level level, std::string_view m) {
      if (level == trainpack::logger::Level::kWarning) {
        std::lock_guard<std::mutex> lock(mutex_);
        lines_.emplace_back(m);
      }
    });
  }
  ~WarningLog() { trainpack::logger::remove_sink(id_); }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }

 private:
  int id_;
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

TEST_F(ImageDecodeTest, ExtensionNamingTheOtherFormat) {
  const std::string jpeg = encode_test_jpeg({8, 8, 3, picture(8, 8, 3), 90, false});
  const fs::path path = dir() / "photo.png";
  write_bytes(path, jpeg);
  WarningLog log;
  EXPECT_EQ(read_image(path.string()).sizes(), (std::vector<int64_t>{3, 8, 8}));
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_NE(log.lines()[0].find(path.string()), std::string::npos) << log.lines()[0];
  EXPECT_NE(log.lines()[0].find("extension says PNG but it holds a JPEG"), std::string::npos);
  expect_decode_error(
      [&] {
        read_image(path.string(),
                   ImageDecodeOptions().extension_mismatch(ExtensionMismatch::kError));
      },
      path.string(), {"extension says PNG", "rename the file", "kDecodeByContent"});
  const fs::path upper = dir() / "scan.JPEG";
  write_bytes(upper, encode_test_png({1, 1, PngColour::kGrey, 8, false, {0}, {}, {}}));
  expect_decode_error(
      [&] {
        read_image(upper.string(),
                   ImageDecodeOptions().extension_mismatch(ExtensionMismatch::kError));
      },
      upper.string(), {"extension says JPEG but it holds a PNG"});
  // Other extensions are not looked at.
  const fs::path other = dir() / "image.bin";
  write_bytes(other, jpeg);
  read_image(other.string(), ImageDecodeOptions().extension_mismatch(ExtensionMismatch::kError));
}

// The first 10 mismatched files of the process warn, then one line says the rest are not
// reported (this test must be the process's first to read such files: the suite's runner forks
// each test).
TEST_F(ImageDecodeTest, ExtensionMismatchWarnsForTheFirstTenFiles) {
  const std::string jpeg = encode_test_jpeg({8, 8, 1, picture(8, 8, 1), 90, false});
  WarningLog log;
  for (int i = 0; i < 14; ++i) {
    const fs::path path = dir() / ("f" + std::to_string(i) + ".png");
    write_bytes(path, jpeg);
    read_image(path.string());
  }
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 11u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_NE(lines[i].find("f" + std::to_string(i) + ".png"), std::string::npos) << lines[i];
  }
  EXPECT_NE(lines[10].find("further such images are decoded by their content without a warning"),
            std::string::npos)
      << lines[10];
}

}  // namespace image_decode_test
