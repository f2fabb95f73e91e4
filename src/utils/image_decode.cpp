// decode_image and read_image (trainpack/utils/image_decode.h): the format by the content, the
// channel conversions and the layout, the messages; the formats themselves are decoded in
// image_decode_png.cpp and image_decode_jpeg.cpp.
#include "trainpack/utils/image_decode.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "trainpack/detail/image_decoders.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace {

constexpr int kImageDecodeMismatchWarnings = 10;
// Files whose extension named the other format, in this process (read_image's warnings).
std::atomic<int64_t> image_decode_mismatches{0};

const char* image_decode_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPNG:
      return "PNG";
    case ImageFormat::kJPEG:
      return "JPEG";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

// What the first bytes of a file that is neither PNG nor JPEG look like it is ("" when unknown).
std::string image_decode_guess(const uint8_t* data, size_t size) {
  auto starts = [&](const char* magic) {
    const size_t n = std::strlen(magic);
    if (size < n) return false;
    for (size_t i = 0; i < n; ++i) {
      if (std::tolower(data[i]) != static_cast<unsigned char>(magic[i])) return false;
    }
    return true;
  };
  size_t skip = 0;  // leading white space of a text file
  while (skip < size && skip < 64 && std::isspace(data[skip])) ++skip;
  const uint8_t* text = data + skip;
  auto text_starts = [&](const char* magic) {
    const size_t n = std::strlen(magic);
    if (size - skip < n) return false;
    for (size_t i = 0; i < n; ++i) {
      if (std::tolower(text[i]) != static_cast<unsigned char>(magic[i])) return false;
    }
    return true;
  };
  if (text_starts("<!doctype html") || text_starts("<html") || text_starts("<head") ||
      text_starts("<!--")) {
    return "an HTML page? (a failed download, or an error page saved under the image's name)";
  }
  if (text_starts("<?xml") || text_starts("<svg")) return "XML or SVG, not a bitmap image?";
  if (text_starts("{") || text_starts("[")) return "JSON text? (an error message from a server)";
  if (starts("gif8")) return "a GIF image";
  if (size >= 12 && starts("riff") && std::memcmp(data + 8, "WEBP", 4) == 0) {
    return "a WebP image";
  }
  if (starts("bm")) return "a BMP image?";
  if (size >= 4 && (std::memcmp(data, "II*\0", 4) == 0 || std::memcmp(data, "MM\0*", 4) == 0)) {
    return "a TIFF image";
  }
  if (size >= 12 && std::memcmp(data + 4, "ftyp", 4) == 0) return "a HEIF/AVIF image or a video?";
  if (size >= 4 && std::memcmp(data, "\x89PNG", 4) == 0) return "a damaged PNG signature";
  if (size >= 2 && data[0] == 0xFF && data[1] == 0xD8) return "a damaged JPEG start";
  if (size >= 2 && data[0] == 0x1F && data[1] == 0x8B) return "gzip-compressed data";
  return "";
}

// "starts with 3c 68 74 6d 6c 3e ... ('<html>...')": the first bytes in hex and as text.
std::string image_decode_first_bytes(const uint8_t* data, size_t size) {
  const size_t n = std::min<size_t>(size, 8);
  std::string hex, text;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) hex += ' ';
    hex += fmt::format("{:02x}", data[i]);
    text += std::isprint(data[i]) ? static_cast<char>(data[i]) : '.';
  }
  return fmt::format("{}{} '{}{}'", hex, size > n ? " ..." : "", text, size > n ? "..." : "");
}

[[noreturn]] void image_decode_throw_unknown(const uint8_t* data, size_t size,
                                             const std::string& name) {
  const std::string guess = image_decode_guess(data, size);
  throw ImageDecodeError(
      name,
      fmt::format("cannot decode the image {}: it is neither PNG nor JPEG (it starts with "
                  "{}{}); only PNG and JPEG files are decoded: convert it to PNG or JPEG "
                  "(e.g. with Pillow: Image.open(f).convert('RGB').save('x.png')), or "
                  "remove it from the data set",
                  name, image_decode_first_bytes(data, size), guess.empty() ? "" : ": " + guess));
}

// The format an extension names (kUnknown for an extension that names neither).
ImageFormat image_decode_extension_format(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".png") return ImageFormat::kPNG;
  if (ext == ".jpg" || ext == ".jpeg" || ext == ".jpe" || ext == ".jfif") return ImageFormat::kJPEG;
  return ImageFormat::kUnknown;
}

// ITU-R 601-2 luma as Pillow's convert("L") computes it (299/1000, 587/1000, 114/1000, rounded).
inline uint8_t image_decode_luma(int r, int g, int b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

// `hwc` [H, W, kChannels] as a new [kChannels, H, W] tensor: the common case of
// image_decode_convert, in a loop the compiler unrolls.
template <int kChannels>
at::Tensor image_decode_planes(const at::Tensor& hwc, int64_t height, int64_t width) {
  const int64_t pixels = height * width;
  at::Tensor out = at::empty({kChannels, height, width}, at::kByte);
  const uint8_t* in = hwc.data_ptr<uint8_t>();
  uint8_t* planes[kChannels];
  for (int c = 0; c < kChannels; ++c) planes[c] = out.data_ptr<uint8_t>() + c * pixels;
  for (int64_t i = 0; i < pixels; ++i, in += kChannels) {
    for (int c = 0; c < kChannels; ++c) planes[c][i] = in[c];
  }
  return out;
}

// `hwc` [H, W, C] (C in 1..4) with `channels` and `layout`: a new contiguous tensor, or `hwc`
// itself (or a view of it, for one channel in [C, H, W]) when its bytes are already the result.
at::Tensor image_decode_convert(at::Tensor hwc, ImageChannels channels, ImageLayout layout) {
  const int64_t in_c = hwc.size(2);
  int64_t out_c = in_c;
  switch (channels) {
    case ImageChannels::kKeep:
      break;
    case ImageChannels::kGrey:
      out_c = 1;
      break;
    case ImageChannels::kRGB:
      out_c = 3;
      break;
    case ImageChannels::kRGBA:
      out_c = 4;
      break;
  }
  if (out_c == in_c && layout == ImageLayout::kHWC) return hwc;
  const int64_t height = hwc.size(0), width = hwc.size(1);
  const int64_t pixels = height * width;
  if (out_c == in_c && in_c == 1) return hwc.view({1, height, width});  // the same bytes
  if (out_c == in_c && in_c == 3) return image_decode_planes<3>(hwc, height, width);
  if (out_c == in_c && in_c == 4) return image_decode_planes<4>(hwc, height, width);
  at::Tensor out = layout == ImageLayout::kHWC ? at::empty({height, width, out_c}, at::kByte)
                                               : at::empty({out_c, height, width}, at::kByte);
  const uint8_t* in = hwc.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  // Element (pixel i, channel c) of the result is at i * pixel_step + c * channel_step.
  const int64_t pixel_step = layout == ImageLayout::kHWC ? out_c : 1;
  const int64_t channel_step = layout == ImageLayout::kHWC ? 1 : pixels;
  const bool in_has_colour = in_c >= 3;
  const bool in_has_alpha = in_c == 2 || in_c == 4;
  for (int64_t i = 0; i < pixels; ++i, in += in_c) {
    uint8_t v[4];
    if (out_c == in_c) {
      std::memcpy(v, in, static_cast<size_t>(in_c));
    } else {
      const uint8_t alpha = in_has_alpha ? in[in_c - 1] : 255;
      if (out_c <= 2) {
        v[0] = in_has_colour ? image_decode_luma(in[0], in[1], in[2]) : in[0];
        v[1] = alpha;
      } else {
        v[0] = in[0];
        v[1] = in_has_colour ? in[1] : in[0];
        v[2] = in_has_colour ? in[2] : in[0];
        v[3] = alpha;
      }
    }
    uint8_t* p = dst + i * pixel_step;
    for (int64_t c = 0; c < out_c; ++c) p[c * channel_step] = v[c];
  }
  return out;
}

}  // namespace

ImageDecodeError::ImageDecodeError(const std::string& path, const std::string& message)
    : std::runtime_error(message), path_(std::make_shared<const std::string>(path)) {}

namespace detail {

bool image_over_pixel_limit(uint64_t width, uint64_t height, int64_t max_pixels) {
  // Both are below 2^32: the product fits.
  return max_pixels > 0 && width * height > static_cast<uint64_t>(max_pixels);
}

void throw_image_over_pixel_limit(const std::string& name, const char* format, uint64_t width,
                                  uint64_t height, int64_t max_pixels) {
  throw ImageDecodeError(
      name, fmt::format("cannot decode the {} image {}: it is {}x{} = {} pixels, more than the "
                        "limit of {} pixels (a guard against decompression bombs: small files "
                        "that decode to huge images); if the file is trusted, raise the limit "
                        "with ImageDecodeOptions().max_pixels(n) (0: no limit)",
                        format, name, width, height, width * height, max_pixels));
}

uint8_t* allocate_image_pixels(at::Tensor* hwc, std::string* error, uint64_t height, uint64_t width,
                               int channels) noexcept {
  try {
    *hwc =
        at::empty({static_cast<int64_t>(height), static_cast<int64_t>(width), channels}, at::kByte);
    return hwc->data_ptr<uint8_t>();
  } catch (const std::exception& e) {
    *error = e.what();
  } catch (...) {
    *error = "unknown error";
  }
  return nullptr;
}

void throw_image_out_of_memory(const std::string& name, const char* format, uint64_t width,
                               uint64_t height, const std::string& reason) {
  throw ImageDecodeError(
      name, fmt::format("cannot decode the {} image {}: no memory for its {}x{} pixels ({}); "
                        "free memory, or lower ImageDecodeOptions().max_pixels(n) to refuse "
                        "such images with a clear error",
                        format, name, width, height, reason));
}

void throw_image_truncated(const std::string& name, const char* format, size_t size) {
  throw ImageDecodeError(
      name, fmt::format("cannot decode the {} image {}: it is truncated (the data ends after {} "
                        "bytes, before the image is complete); the file was not written or "
                        "downloaded completely: copy or download it again",
                        format, name, size));
}

void throw_image_corrupt(const std::string& name, const char* format,
                         const std::string& library_message) {
  throw ImageDecodeError(
      name, fmt::format("cannot decode the {} image {}: the data is corrupt or of a kind the "
                        "decoder does not support ({}); replace the file with a good copy (or one "
                        "re-saved as 8-bit PNG or JPEG), or remove it from the data set",
                        format, name, library_message));
}

}  // namespace detail

ImageFormat sniff_image_format(const uint8_t* data, size_t size) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (data == nullptr) return ImageFormat::kUnknown;
  if (size >= sizeof kPng && std::memcmp(data, kPng, sizeof kPng) == 0) return ImageFormat::kPNG;
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
    return ImageFormat::kJPEG;
  }
  return ImageFormat::kUnknown;
}

at::Tensor decode_image(const uint8_t* data, size_t size, const std::string& name,
                        const ImageDecodeOptions& options) {
  if (size == 0 || data == nullptr) {
    throw ImageDecodeError(name, fmt::format("cannot decode the image {}: it is empty (0 bytes); "
                                             "the file was not written completely: write, copy "
                                             "or download it again",
                                             name));
  }
  detail::DecodedImage image;
  switch (sniff_image_format(data, size)) {
    case ImageFormat::kPNG:
      image = detail::decode_png_image(data, size, name, options.max_pixels());
      break;
    case ImageFormat::kJPEG:
      image = detail::decode_jpeg_image(data, size, name, options.max_pixels());
      break;
    case ImageFormat::kUnknown:
      image_decode_throw_unknown(data, size, name);
  }
  return image_decode_convert(std::move(image.hwc), options.channels(), options.layout());
}

at::Tensor read_image(const std::string& path, const ImageDecodeOptions& options) {
  std::string bytes;
  try {
    ReadFileOptions read_options;
    read_options.kind = "image";
    bytes = read_file<std::string>(path, read_options);
  } catch (const FileRefusedError& e) {
    throw ImageDecodeError(path, fmt::format("cannot read the image file {}: it {}; give the path "
                                             "of a regular file",
                                             path, e.reason()));
  } catch (const std::system_error& e) {
    throw ImageDecodeError(path, fmt::format("cannot read the image file {}: {}; check that the "
                                             "path exists, is a regular file and is readable",
                                             path, e.code().message()));
  }
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const ImageFormat content = sniff_image_format(data, bytes.size());
  const ImageFormat named = image_decode_extension_format(path);
  if (content != ImageFormat::kUnknown && named != ImageFormat::kUnknown && content != named) {
    if (options.extension_mismatch() == ExtensionMismatch::kError) {
      throw ImageDecodeError(
          path,
          fmt::format("cannot decode the image {}: its extension says {} but it holds a {} "
                      "image; rename the file, or decode it by its content with "
                      "ImageDecodeOptions().extension_mismatch("
                      "ExtensionMismatch::kDecodeByContent)",
                      path, image_decode_format_name(named), image_decode_format_name(content)));
    }
    const int64_t seen = image_decode_mismatches.fetch_add(1) + 1;
    if (seen <= kImageDecodeMismatchWarnings) {
      TP_LOG_WARN("Image {}: its extension says {} but it holds a {} image; decoded as {}", path,
                  image_decode_format_name(named), image_decode_format_name(content),
                  image_decode_format_name(content));
    }
    if (seen == kImageDecodeMismatchWarnings + 1) {
      TP_LOG_WARN(
          "Image {}: its extension names the other format too; further such images are "
          "decoded by their content without a warning (the first {} were reported)",
          path, kImageDecodeMismatchWarnings);
    }
  }
  return decode_image(data, bytes.size(), path, options);
}

}  // namespace trainpack
