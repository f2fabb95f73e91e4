// Decoding PNG and JPEG images into uint8 tensors, with Debian's libpng and libjpeg-turbo: what an
// image data set of files (torchvision's ImageFolder, tensorpack's dataset readers) needs.
//
// PNG: every colour type and bit depth. Grey with 1, 2 or 4 bits is expanded to 8; a palette
// becomes RGB (RGBA when it has transparency); a tRNS chunk becomes an alpha channel; 16-bit
// samples become 8-bit with libpng's png_set_scale_16 (v * 255 / 65535, rounded exactly);
// interlaced (Adam7) images are decoded whole. Gamma and colour-profile chunks are ignored, as
// Pillow ignores them.
//
// JPEG: grey, YCbCr (RGB) and Adobe CMYK/YCCK, baseline and progressive, with libjpeg-turbo's
// accurate integer IDCT (JDCT_ISLOW) and fancy upsampling, libjpeg's defaults and Pillow's: the
// pixels equal Pillow's for the same libjpeg-turbo. CMYK becomes RGB as Pillow's convert("RGB")
// computes it: R = (255 - C) * (255 - K) / 255 (rounded) for the ink values C and K, where a file
// with an Adobe APP14 marker (as Photoshop and Pillow write CMYK) stores the inks inverted (C = 255
// - stored value) and a file without one stores them as they are.
//
// Image data that ends early is an ImageDecodeError. A JPEG must reach its end-of-image marker (a
// progressive JPEG cut between two scans would otherwise pass for complete, blurred); a PNG whose
// rows are all there but whose IEND chunk is missing decodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

namespace trainpack {

// Where the channel dimension is: [C, H, W] (what torchvision's ToTensor and LibTorch's
// convolutions take) or [H, W, C] (how the file stores the pixels).
enum class ImageLayout { kCHW, kHWC };

// The channels of the result.
//   kKeep: what the file holds: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA (a palette PNG is RGB, or RGBA
//          when it has transparency; a CMYK JPEG is RGB).
//   kGrey, kRGB, kRGBA: converted: alpha dropped, or added opaque (255); grey replicated into R, G
//          and B; RGB to grey with the ITU-R 601-2 luma weights, computed as Pillow's convert("L")
//          does: L = (R * 19595 + G * 38470 + B * 7471 + 32768) >> 16, i.e. R * 299/1000 + G *
//          587/1000 + B * 114/1000 rounded.
enum class ImageChannels { kKeep, kGrey, kRGB, kRGBA };

// An image format, as sniff_image_format tells it from the first bytes.
enum class ImageFormat { kUnknown, kPNG, kJPEG };

// What read_image does with a file whose extension names the other format (x.png holding a JPEG):
//   kDecodeByContent: decodes it by its content and logs a warning naming the file (for the first
//                     10 such files of the process; then one line saying that further ones are not
//                     reported);
//   kError:           throws ImageDecodeError.
enum class ExtensionMismatch { kDecodeByContent, kError };

struct ImageDecodeOptions {
  // The channels of the result. Default RGB, as torchvision's ImageFolder converts every image.
  TORCH_ARG(ImageChannels, channels) = ImageChannels::kRGB;
  // The layout of the result.
  TORCH_ARG(ImageLayout, layout) = ImageLayout::kCHW;
  // The most pixels (width * height) an image may have: a larger one is refused from its header,
  // before any pixel is decoded or memory allocated for it (a small file that claims a huge image,
  // a decompression bomb). Default: Pillow's MAX_IMAGE_PIXELS, 89478485. 0 (or less): no limit.
  TORCH_ARG(int64_t, max_pixels) = 89478485;
  // What read_image does when the extension names the other format.
  TORCH_ARG(ExtensionMismatch, extension_mismatch) = ExtensionMismatch::kDecodeByContent;
};

// Thrown for an image that does not decode: a file that cannot be read, an empty file, content
// that is neither PNG nor JPEG, a truncated or corrupt image, one over max_pixels, an extension
// that names the other format (with ExtensionMismatch::kError). what() names the file, says what
// is wrong with it and what to do; path() is the file (the `name` given to decode_image).
class ImageDecodeError : public std::runtime_error {
 public:
  ImageDecodeError(const std::string& path, const std::string& message);
  const std::string& path() const noexcept { return *path_; }

 private:
  // Shared: copying an exception must not throw.
  std::shared_ptr<const std::string> path_;
};

// The format of `size` bytes at `data`, from their magic bytes only (PNG: the 8-byte signature;
// JPEG: FF D8 FF); kUnknown for anything else, including fewer bytes than the magic.
ImageFormat sniff_image_format(const uint8_t* data, size_t size);

// Decodes the PNG or JPEG of `size` bytes at `data` (the format by its content). `name`, usually
// the file's path, is only used in messages and as ImageDecodeError::path(). Returns a contiguous
// uint8 CPU tensor, [C, H, W] or [H, W, C] by options.layout(), with the channels of
// options.channels(). A null `data` is taken as empty. Throws ImageDecodeError (above).
// Thread-safe: images may be decoded on several threads at once.
at::Tensor decode_image(const uint8_t* data, size_t size, const std::string& name,
                        const ImageDecodeOptions& options = {});

// Reads the file `path` (a regular file) and decodes it as decode_image does. The format is the
// content's; an extension (.png; .jpg, .jpeg, .jpe, .jfif; any case) that names the other format
// is handled by options.extension_mismatch(); other extensions are not looked at. Throws
// ImageDecodeError, also when the file does not exist, cannot be read (the system's reason) or is
// empty.
at::Tensor read_image(const std::string& path, const ImageDecodeOptions& options = {});

}  // namespace trainpack
