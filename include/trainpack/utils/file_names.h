// The one rule for file names made from user strings (a stat name, a tensor name, a prefix), used
// by MinSaver / MaxSaver's best copy and DumpTensorAsImage's images. A safe component is one name
// inside the output directory, never a path, a hidden file or one of trainpack's own files:
// '/', '\\' and control characters become '_'; a leading '.' becomes '_'; "" becomes "_"; a
// reserved name (is_reserved_file_name) gets a leading '_'; a name over kMaxFileNameComponent
// bytes is cut (never inside a UTF-8 character) and ended with '-' and 8 hex digits of a hash of
// the whole string. Other bytes are kept. The same on every run, so a resumed run finds the files
// of the run before. A name given explicitly (MinSaverOptions().filename) is checked instead
// (file_name_problem), and refused by the constructor naming the argument.
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
