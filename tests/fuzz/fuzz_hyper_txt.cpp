// Fuzzes the hyper-parameter file's parser (lookup_hyper_txt), which never throws.
#include <cstddef>
#include <cstdint>
#include <string>

#include "trainpack/utils/hyper_txt.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const trainpack::HyperTxtLookup r = trainpack::lookup_hyper_txt(text, "learning_rate");
  if (r.value && r.line == 0) __builtin_trap();
  if (r.bad_lines > 0 && r.first_bad_line == 0) __builtin_trap();
  return 0;
}
