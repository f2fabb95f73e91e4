// The one rule for file names made from user strings (a stat name, a tensor name, a prefix):
// MinSaver / MaxSaver's best copy (`min-val-error-top1.data`) and DumpTensorAsImage's images
// (`<prefix>-ep003-0.png`) name their files with safe_file_name_component().
//
// A safe component is one name inside the output directory, never a path, a hidden file or one of
// trainpack's own files:
// - '/', '\\', control characters (bytes below 0x20, and 0x7f) become '_';
// - a leading '.' becomes '_' (so no hidden file, no "." or "..");
// - the empty string becomes "_";
// - a name that trainpack uses in a log directory (is_reserved_file_name) gets a leading '_';
// - longer than kMaxFileNameComponent bytes: cut to fit (never inside a UTF-8 character) and ended
//   with '-' and 8 hex digits of a hash of the whole string, so two long names stay apart.
// Other bytes (UTF-8 letters, spaces) are kept. The result is the same on every run, so a resumed
// run finds the files of the run before.
//
// A file name given explicitly (MinSaverOptions().filename) is not changed but checked:
// file_name_problem() says why it breaks the rule, and the constructor throws naming the argument.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace trainpack {

// The longest component safe_file_name_component returns, in bytes: room for the suffixes that
// callers add (`-ep001-12.png`, `.index`) within the 255 bytes of a Linux file name.
constexpr size_t kMaxFileNameComponent = 128;

// `text` made into a safe file name component by the rule above. Idempotent: a safe name is
// returned unchanged.
std::string safe_file_name_component(std::string_view text);

// Why `name` breaks the rule above ("it contains '/'", "it starts with '.'", ...), or nullopt
// when safe_file_name_component(name) == name.
std::optional<std::string> file_name_problem(std::string_view name);

// Whether `name` is, or could be, a file trainpack itself keeps in a log directory: `checkpoint`,
// `stats.json`, `log.log`, `hyper.txt` (each also with any `.<suffix>`, such as
// `checkpoint.previous` or `stats.json.tmp`), `model-<digits>` with or without a suffix,
// `events.out.tfevents*`, and any name ending in `.tmp` or `.lock` (temporary and lock files).
bool is_reserved_file_name(std::string_view name);

}  // namespace trainpack
