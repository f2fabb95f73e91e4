// What the augmentors of input/imgaug.h share between their two sources: the checks and the copy
// every augment() starts with. Defined in src/input/imgaug.cpp; used by it and by
// src/input/imgaug_resize.cpp.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include "trainpack/input/imgaug.h"

namespace trainpack {
namespace detail {

// The tensor's shape as "[3, 28, 28]".
std::string imgaug_shape(const at::Tensor& t);
// std::invalid_argument naming `aug` unless `chw` is a defined, 3-D CPU tensor.
void imgaug_check_image(const ImageAugmentor& aug, const at::Tensor& chw);
// A contiguous copy that shares no storage with `chw` (a memcpy, on the calling thread).
at::Tensor imgaug_copy(const at::Tensor& chw);

}  // namespace detail
}  // namespace trainpack
