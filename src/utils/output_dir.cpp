// The output directory of a callback (trainpack/utils/output_dir.h).
#include "trainpack/utils/output_dir.h"

#include <fmt/format.h>

#include <stdexcept>

#include "trainpack/utils/logger.h"

namespace trainpack {

std::optional<std::string> output_dir_or_logger_dir(const std::optional<std::string>& given) {
  if (given) return given;
  return logger::get_logger_dir();
}

std::string missing_output_dir_message(std::string_view who, std::string_view option) {
  if (option.empty()) {
    return fmt::format(
        "{}: the logger directory is not set; call trainpack::logger::set_logger_dir(dir) first",
        who);
  }
  return fmt::format(
      "{}: no directory was given and the logger directory is not set; pass one with {}, or call "
      "trainpack::logger::set_logger_dir(dir) first",
      who, option);
}

std::string resolve_output_dir(const std::optional<std::string>& given, std::string_view who,
                               std::string_view option) {
  std::optional<std::string> dir = output_dir_or_logger_dir(given);
  if (!dir) throw std::invalid_argument(missing_output_dir_message(who, option));
  return std::move(*dir);
}

}  // namespace trainpack
