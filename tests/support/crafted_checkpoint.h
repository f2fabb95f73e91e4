// Checkpoint files as a hostile writer makes them: valid zip archives with a correct trailer
// (anyone can recompute a CRC-32C) around a pickle or records that lie.
#pragma once

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "support/files.h"
#include "trainpack/utils/crc32c.h"

namespace trainpack {
namespace testing {

// What goes into a crafted checkpoint: the tensors to pickle (by name), and optionally what to do
// to the pickle's bytes and which tensors' storages to write as the records instead of their own.
struct CraftedCheckpoint {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::function<void(std::vector<char>&)> edit_pickle;
  // When not empty: one tensor per record, in the pickle's storage order (the tensors' order).
  std::vector<at::Tensor> records;
};

// The bytes of a data file holding `spec`: the archive torch::jit::pickle_save would write, with
// trainpack's trailer (entries = the number of tensors, the CRC-32C of what precedes it).
inline std::string crafted_checkpoint_bytes(const CraftedCheckpoint& spec) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : spec.tensors) dict.insert(name, t);
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&pickle](const char* bytes, size_t size) { pickle.insert(pickle.end(), bytes, bytes + size); },
      nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  if (spec.edit_pickle) spec.edit_pickle(pickle);
  std::string archive;
  {
    caffe2::serialize::PyTorchStreamWriter zip([&archive](const void* bytes, size_t size) {
      archive.append(static_cast<const char*>(bytes), size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(),
                                       spec.records.empty() ? pickler.tensorData() : spec.records,
                                       zip);
    zip.writeEndOfFile();
  }
  const std::string head = fmt::format("trainpack-checkpoint 2 entries={} crc32c=", dict.size());
  const size_t n = archive.size();
  const size_t comment = head.size() + 8;
  archive[n - 2] = static_cast<char>(comment & 0xff);
  archive[n - 1] = static_cast<char>(comment >> 8);
  return archive + head + fmt::format("{:08x}", crc32c::value(archive));
}

inline void write_crafted_checkpoint(const std::string& prefix, const CraftedCheckpoint& spec) {
  write_text(prefix + ".data", crafted_checkpoint_bytes(spec));
}

// `t` (a view of the same storage) with another storage offset, sizes and strides: no check of
// LibTorch's is run, so the result may point outside its storage.
inline at::Tensor with_geometry(const at::Tensor& t, int64_t storage_offset, at::IntArrayRef sizes,
                                at::IntArrayRef strides) {
  at::Tensor v = at::empty({0}, t.options());
  v.set_(t.storage(), 0, {0}, {1});
  v.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  v.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  return v;
}

}  // namespace testing
}  // namespace trainpack
