#include "trainpack/callbacks/human_param.h"

#include <fmt/format.h>

#include <filesystem>
#include <stdexcept>

#include "trainpack/utils/file_io.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/hyper_txt.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/output_dir.h"

namespace trainpack {

// ---- HumanHyperParamSetter ----

HumanHyperParamSetter::HumanHyperParamSetter(HyperParamRef param, std::string file_name)
    : HyperParamSetter(std::move(param), "HumanHyperParamSetter") {
  if (file_name.empty()) throw std::invalid_argument("HumanHyperParamSetter: file_name is empty");
  const std::filesystem::path file(file_name);
  if (file.is_absolute()) {
    path_ = file.string();
  } else {
    // A relative file_name is in the logger directory.
    const std::string dir =
        resolve_output_dir(std::nullopt, "HumanHyperParamSetter", "an absolute file_name");
    path_ = (std::filesystem::path(dir) / file).string();
  }
  TP_LOG_INFO("Use {} to set hyperparam: '{}'.", path_, param_->readable_name());
  rerun_at_resume_ = true;  // an edit made while the run was down applies at once
}

void HumanHyperParamSetter::warn_once(const std::string& file_state, const std::string& message) {
  if (warned_state_ == file_state) return;  // said already, and the file has not changed since
  warned_state_ = file_state;
  TP_LOG_WARN("HumanHyperParamSetter: {}", message);
}

std::optional<double> HumanHyperParamSetter::_get_value_to_set() {
  const std::string name = param_->readable_name();
  const std::string keeping =
      fmt::format("keeping {} = {}", name, python_float_repr(get_current_value()));

  // Opened without following a symbolic link and without blocking, and checked with fstat before
  // a byte is read: a huge file, a FIFO or a device is never read, and a link planted in a shared
  // directory cannot make the job read (and quote) a file it was not meant to.
  ReadFileOptions options;
  options.max_bytes = static_cast<uint64_t>(kMaxFileSize);
  options.kind = "hyper-parameter file";
  options.follow_symlinks = false;
  std::string text;
  try {
    std::optional<std::string> read = read_file_if_exists(path_, options);
    if (!read) {  // no file: no change
      warned_state_.reset();
      return std::nullopt;
    }
    text = std::move(*read);
  } catch (const FileRefusedError& e) {
    // The reason names the kind of file or its size, never its content.
    warn_once(e.what(), fmt::format("{} {} and is not read; {}", path_, e.reason(), keeping));
    return std::nullopt;
  } catch (const std::exception& e) {
    warn_once(e.what(), fmt::format("{}; {}", e.what(), keeping));
    return std::nullopt;
  }
  const std::string& file_state = text;  // warnings repeat only when the content changes

  const HyperTxtLookup lookup = lookup_hyper_txt(text, name);
  const std::optional<double> found = lookup.value;
  const size_t found_line = lookup.line, first_bad = lookup.first_bad_line,
               bad_count = lookup.bad_lines;
  if (bad_count > 0) {
    const std::string others = bad_count == 1
                                   ? ""
                                   : fmt::format(" ({} more line{} malformed)", bad_count - 1,
                                                 bad_count == 2 ? " is" : "s are");
    // The line is named, not quoted: the file may hold what the log should not (log.log can be
    // more readable than the file).
    warn_once(file_state, fmt::format("{} line {} is not 'name: value'{}; {}", path_, first_bad,
                                      others, keeping));
    return std::nullopt;
  }
  if (!found) {
    warn_once(file_state, fmt::format("cannot find '{}' in {}; {}", name, path_, keeping));
    return std::nullopt;
  }
  if (!param_->range().contains(*found)) {
    warn_once(file_state,
              fmt::format("{} line {}: {} = {} is outside its range ({}); {}", path_, found_line,
                          name, python_float_repr(*found), param_->range().str(), keeping));
    return std::nullopt;
  }
  warned_state_.reset();
  return found;
}

}  // namespace trainpack
