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
#pragma once

namespace trainpack {

void protect_process_io();

}  // namespace trainpack
