// Guarding a long unattended run against the operating system and the console. Why each guard is
// needed: docs/trainer.md, "Signals: Ctrl-C and SIGTERM".
#pragma once

#include <cstdint>
#include <cstdio>
#include <string_view>

namespace trainpack {

// Opens a closed fd 0, 1 or 2 on /dev/null (so that the next files opened do not take its
// number), and ignores SIGPIPE and SIGXFSZ (a write to a closed pipe or past `ulimit -f` then
// fails with EPIPE or EFBIG instead of killing the process) unless the program has its own
// handler; an ignored signal stays ignored. Python does the same for the signals. Called by
// logger::set_logger_dir, configure_runtime and the trainer's main loop; a program may call it
// first thing in main(). Idempotent and cheap.
void protect_process_io();

// Writes `text` to `stream` (stdout, stderr, or a file) after what its stdio buffer holds, waiting
// for a slow reader, until stop_waiting_for_console() was called: from then on what the stream
// cannot take at once is dropped (and its buffer left to the exit). Returns false when something
// was dropped or the write failed (EPIPE: the reader is gone).
bool write_console(std::FILE* stream, std::string_view text);

// From now on write_console waits for no reader. Async-signal-safe (a signal handler calls it).
void stop_waiting_for_console() noexcept;

// Bytes that write_console dropped since the process started.
uint64_t console_bytes_dropped();

}  // namespace trainpack
