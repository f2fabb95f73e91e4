#include "trainpack/utils/error_file.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>

#include "trainpack/utils/atomic_file.h"

namespace trainpack {

std::string torchrun_error_file_from_environment() {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  return path != nullptr ? std::string(path) : std::string();
}

void write_torchrun_error_file(const std::string& path, const std::string& message) {
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const nlohmann::json j = {{"message", message}, {"timestamp", std::to_string(now)}};
  write_file_atomically(path, j.dump());
}

}  // namespace trainpack
