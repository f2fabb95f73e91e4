// Fuzzes decode_image (PNG with libpng, JPEG with libjpeg-turbo): any input either decodes into a
// uint8 tensor of the documented shape or throws ImageDecodeError; nothing else escapes. The pixel
// limit is lowered so that an input claiming a large image is refused instead of taking the
// fuzzer's memory. The last byte picks the channels and the layout.
#include <cstddef>
#include <cstdint>
#include <exception>

#include "trainpack/utils/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using trainpack::ImageChannels;
  const uint8_t pick = size > 0 ? data[size - 1] : 0;
  const ImageChannels channels[] = {ImageChannels::kKeep, ImageChannels::kGrey, ImageChannels::kRGB,
                                    ImageChannels::kRGBA};
  const auto options =
      trainpack::ImageDecodeOptions()
          .channels(channels[pick % 4])
          .layout((pick & 4) != 0 ? trainpack::ImageLayout::kHWC : trainpack::ImageLayout::kCHW)
          .max_pixels(1 << 20);
  try {
    const at::Tensor t = trainpack::decode_image(data, size, "fuzz-input", options);
    if (t.scalar_type() != at::kByte || t.dim() != 3 || !t.is_contiguous()) __builtin_trap();
    const int64_t c = (pick & 4) != 0 ? t.size(2) : t.size(0);
    if (c < 1 || c > 4 || t.numel() > int64_t{4} << 20) __builtin_trap();
  } catch (const trainpack::ImageDecodeError&) {
  } catch (...) {
    __builtin_trap();  // documented: every failure is an ImageDecodeError
  }
  return 0;
}
