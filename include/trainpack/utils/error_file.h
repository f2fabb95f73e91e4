// torchrun's error file: where a worker that fails writes why, so that torchrun's failure summary
// shows the cause instead of only an exit code. torchrun (torch.distributed.elastic) gives every
// worker the path in TORCHELASTIC_ERROR_FILE and reads the file after the worker ended. The
// format: `{"message": "<message>", "timestamp": "<seconds since the Unix epoch>"}`, replaced
// atomically (write_file_atomically), so torchrun never reads half a message.
#pragma once

#include <string>

namespace trainpack {

// The path in TORCHELASTIC_ERROR_FILE, or "" when it is not set (or empty).
std::string torchrun_error_file_from_environment();

// Writes `message` to `path` in torchrun's format (above). Throws std::runtime_error naming the
// file and the system's reason when it cannot be written.
void write_torchrun_error_file(const std::string& path, const std::string& message);

}  // namespace trainpack
