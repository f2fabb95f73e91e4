// Fuzzes the parser of the `checkpoint` index (parse_checkpoint_index). Every bad input must end
// in a CheckpointError whose message does not quote the file's text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "trainpack/utils/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const trainpack::CheckpointIndex index = trainpack::parse_checkpoint_index(text, "checkpoint");
    if (index.model_checkpoint_path.empty()) __builtin_trap();  // documented never to happen
  } catch (const trainpack::CheckpointError&) {
  }
  return 0;
}
