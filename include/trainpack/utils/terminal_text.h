// Text that comes from outside the program (a file someone else can write, a checkpoint's entry
// names) made safe to print on a terminal or into a log that is read on one: no escape sequence
// in it reaches the terminal (an OSC 52 sequence writes the reader's clipboard, others retitle the
// window, move the cursor or rewrite what is already on the screen).
#pragma once

#include <string>
#include <string_view>

namespace trainpack {

// What terminal_safe does with a line feed.
enum class LineFeeds {
  kKeep,    // '\n' stays (multi-line text)
  kEscape,  // '\n' is written \x0a (a name or a value that must stay on its log line)
};

// `text` with every byte that a terminal acts on written as `\xNN` (two lower-case hex digits):
// the C0 controls (0x00-0x1f) but '\t' and, with LineFeeds::kKeep, '\n'; DEL (0x7f); the C1
// controls U+0080-U+009F (their UTF-8 form, each byte escaped: \xc2\x9b); and every byte that is
// not part of well-formed UTF-8 (a lone 0x9b is CSI to a terminal in an 8-bit mode). Everything
// else, well-formed UTF-8 included, is kept as it is. The result is for reading, not reversible:
// a '\' of `text` is kept, so `\x1b` typed as four characters reads the same as an escaped ESC.
std::string terminal_safe(std::string_view text, LineFeeds line_feeds = LineFeeds::kKeep);

}  // namespace trainpack
