// Prints what a trainpack checkpoint holds, as trainpack's own reader loads it: one line per
// entry, sorted by name, "<name> <dtype> [<shape>] <bytes> crc32=<hex>", where the CRC-32 (zlib's)
// is of the entry's elements in row-major order. torch_load_digest.py prints the same lines from
// Python's torch.load, so that the outputs of two LibTorch versions, and of Python, can be
// compared as text: equal lines mean the same tensors, bit for bit.
//
//   trainpack_checkpoint_digest PATH     PATH: a checkpoint prefix (dir/model-600), its .data
//                                        file, or a directory with a `checkpoint` index (latest)
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "trainpack/utils/checkpoint.h"

namespace {

// The names Python's torch gives the dtypes (torch.float32 -> "float32").
std::string dtype_name(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Short:
      return "int16";
    case c10::ScalarType::Char:
      return "int8";
    case c10::ScalarType::Byte:
      return "uint8";
    case c10::ScalarType::Bool:
      return "bool";
    default:
      return c10::toString(type);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CHECKPOINT (a prefix, its .data file, or a log directory)\n",
                 argv[0]);
    return 2;
  }
  try {
    const trainpack::TensorMap tensors =
        trainpack::read_checkpoint(trainpack::resolve_checkpoint_path(argv[1]));
    std::vector<std::string> names;
    for (const auto& entry : tensors) names.push_back(entry.first);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const at::Tensor t = tensors.at(name).contiguous();
      const auto bytes = static_cast<size_t>(t.numel()) * t.element_size();
      uLong crc = crc32(0L, Z_NULL, 0);
      const auto* p = static_cast<const Bytef*>(t.data_ptr());
      for (size_t done = 0; done < bytes;) {
        const auto n = static_cast<uInt>(std::min<size_t>(bytes - done, 1u << 30));
        crc = crc32(crc, p + done, n);
        done += n;
      }
      std::string shape;
      for (int64_t d = 0; d < t.dim(); ++d) shape += (d ? ", " : "") + std::to_string(t.size(d));
      std::printf("%s %s [%s] %zu crc32=%08lx\n", name.c_str(), dtype_name(t.scalar_type()).c_str(),
                  shape.c_str(), bytes, static_cast<unsigned long>(crc));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainpack_checkpoint_digest: %s\n", e.what());
    return 1;
  }
  return 0;
}
