// The tensors a LibTorch pickle would rebuild, read from its opcodes without building them: for
// each call of torch._utils._rebuild_tensor_v2, its storage (record name, element count) and its
// geometry (offset, sizes, strides), with its key when it is a string-keyed dict entry's value.
// The checkpoint reader (utils/checkpoint.h) checks every tensor against its storage with these
// before LibTorch's unpickler runs; why:
// docs/libtorch-versions.md, "Checkpoints from elsewhere" (under "What differs between versions").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainpack {

// A tensor of a pickle, as its rebuild call describes it.
struct PickledTensor {
  std::string name;         // its dict key; "" when it is not a string-keyed dict's value
  std::string storage_key;  // the record's name under data/ ("0")
  int64_t storage_numel = 0;
  int64_t storage_offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;

  // "" when every element lies inside the storage; else what does not fit ("does not fit in its
  // storage (storage offset 1, sizes [288], strides [1], but the storage holds 288 elements)").
  std::string fit_problem() const;
};

// "" when a tensor of `sizes` and `strides` at `storage_offset` lies inside a storage of
// `storage_numel` elements: storage_offset + sum of (size_i - 1) * stride_i + 1 <= storage_numel,
// or, for a tensor with no element, storage_offset <= storage_numel. Computed in 128 bits, so
// that no crafted value overflows it. Else what is wrong, as PickledTensor::fit_problem says it.
std::string tensor_fit_problem(int64_t storage_offset, const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& strides, int64_t storage_numel);

// The tensors rebuilt by `data[0, size)`, a pickle that passed pickle_bounds_problem, in the order
// of the pickle. Only calls whose arguments are literal values are reported (a persistent-id
// storage ('storage', type, key, location, numel), an integer offset, integer tuples); anything
// else is walked over. Never throws for a malformed pickle: it returns what it found.
std::vector<PickledTensor> pickled_tensors(const char* data, size_t size);

}  // namespace trainpack
