// HumanHyperParamSetter (tensorpack's, callbacks/param.py): a hyperparameter set from a file that
// a person edits while training runs (hyper.txt; its lines are read by utils/hyper_txt.h). The
// params and the base, HyperParamSetter, are in callbacks/param.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trainpack/callbacks/param.h"

namespace trainpack {

// tensorpack's HumanHyperParamSetter: sets the param from `<logger dir>/<file_name>` (an absolute
// file_name needs no logger directory), `name: value` lines a person edits during training. The
// file is read every time the setter runs: before_train (a resumed run's too) and every epoch end.
// `#` and blank lines are skipped, other names allowed, the last line for the name wins; a
// missing file changes nothing, silently. The param keeps its value, with a warning naming the
// file and line (never quoting it), for: any malformed line (a half-written file is never
// applied), a value outside the range, no line for the param, a file larger than kMaxFileSize or
// not a regular file (opened without following a link or blocking). A warning is not repeated
// while the file stays the same. Errors: std::invalid_argument at construction when a relative
// file_name has no logger directory. See docs/schedules.md, "hyper.txt".
class HumanHyperParamSetter : public HyperParamSetter {
 public:
  // The largest file that is read, in bytes.
  static constexpr int64_t kMaxFileSize = 64 * 1024;

  explicit HumanHyperParamSetter(HyperParamRef param, std::string file_name = "hyper.txt");
  // The file that is read.
  const std::string& path() const { return path_; }

 protected:
  std::optional<double> _get_value_to_set() override;

 private:
  // Logs `message` unless the last warning was for the same `file_state` (the file's content, or
  // its size and time for a file that is not read).
  void warn_once(const std::string& file_state, const std::string& message);

  std::string path_;
  std::optional<std::string> warned_state_;  // the file state of the last warning
};

}  // namespace trainpack
