// Protecting a long unattended run from three ways the operating system ends a process, or
// mixes up its files, before the program can say anything:
// - closed standard descriptors: a launcher or daemon that starts the program with fd 0, 1 or 2
//   closed makes the next files opened (the log directory's lock, log.log, an event file) take
//   those numbers, and whatever is printed to stdout then lands in them. Every closed standard
//   descriptor is opened on /dev/null.
// - SIGPIPE: `job | tee log` after the terminal closed (tee is gone), or `job | head`: the next
//   write to stdout kills the process with no checkpoint and no log line. SIGPIPE is ignored, so
//   the write fails with EPIPE instead; the logger keeps writing log.log.
// - SIGXFSZ: a write past the file-size limit (`ulimit -f`) kills the process with a full-size
//   temporary file left behind. SIGXFSZ is ignored, so the write fails with EFBIG, which the
//   writer reports (naming the file and the limit) and cleans up after.
// A signal that has a handler of the program's own is left alone; one the program ignores stays
// ignored. Python does the same for SIGPIPE and SIGXFSZ at start-up, so a tensorpack user sees the
// same behaviour.
//
// trainpack calls protect_process_io() where a run starts: logger::set_logger_dir,
// configure_runtime and the trainer's main loop; a program may call it first thing in main().
// Idempotent and cheap.
//
// And one way a reader holds the program up: stdout or stderr into a pipe that nobody reads
// (`job | less` left paused, a launcher that stopped collecting output). Every write to a full
// pipe waits, so training waits, as with any program. But a stop must not: once a stop signal
// came (stop_waiting_for_console(), called by the trainer's signal handler), write_console drops
// what the console cannot take at once, so that the stop checkpoint is written; log.log keeps
// every line, and console_bytes_dropped() says how much the console missed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string_view>

namespace trainpack {

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
