// NVIDIA's management library (NVML), loaded at run time: GPUUtilizationTracker reads the GPUs'
// utilization through it. NVML comes with the NVIDIA driver, not with a package trainpack builds
// against, so `open` loads it with dlopen and looks up the few functions it needs: a machine
// without the driver gets an NvmlError instead of a program that does not start. NVML's functions
// may be called from any thread; an Nvml object is not changed after `open`.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

namespace trainpack {

// The few declarations of NVIDIA's public nvml.h that trainpack uses, written out here (the header
// is not installed on machines without the CUDA toolkit). Names and values are nvml.h's.
namespace nvml {
using Return = int;                          // nvmlReturn_t (a C enum)
constexpr Return kSuccess = 0;               // NVML_SUCCESS
constexpr Return kErrorInvalidArgument = 2;  // NVML_ERROR_INVALID_ARGUMENT
struct DeviceOpaque;                         // struct nvmlDevice_st
using Device = DeviceOpaque*;                // nvmlDevice_t
struct Utilization {                         // nvmlUtilization_t
  unsigned int gpu;                          // percent of time a kernel ran
  unsigned int memory;                       // percent of time memory was read or written
};
}  // namespace nvml

// NVML could not be loaded, initialised or queried; what() says which and why.
class NvmlError : public std::runtime_error {
 public:
  explicit NvmlError(const std::string& message) : std::runtime_error(message) {}
};

class Nvml {
 public:
  static constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";
  static constexpr const char* kLibraryVariable = "TRAINPACK_NVML_LIBRARY";

  // The library `open(path)` loads: `path`, else $TRAINPACK_NVML_LIBRARY, else kDefaultLibrary.
  static std::string library_path(const std::string& path = "");

  // Loads the library, resolves its functions and calls nvmlInit_v2. Throws NvmlError:
  //   `cannot load libnvidia-ml.so.1: <the loader's message>`,
  //   `<library> has no function nvmlDeviceGetCount_v2: <the loader's message>`,
  //   `nvmlInit_v2 failed: <nvmlErrorString>`.
  static std::unique_ptr<Nvml> open(const std::string& path = "");

  // nvmlShutdown, then unloads the library.
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // The library that was loaded.
  const std::string& path() const { return path_; }
  // The number of GPUs (nvmlDeviceGetCount_v2). Throws NvmlError.
  unsigned device_count() const;
  // The GPU of NVML index `index` (nvmlDeviceGetHandleByIndex_v2). Throws NvmlError naming it.
  nvml::Device device(unsigned index) const;
  // The GPU's utilization in percent over NVML's last sample period
  // (nvmlDeviceGetUtilizationRates). Throws NvmlError.
  unsigned gpu_utilization(nvml::Device device) const;
  // nvmlErrorString(result).
  std::string error_string(nvml::Return result) const;

 private:
  struct Functions;
  Nvml(void* handle, std::string path, std::unique_ptr<Functions> functions);
  void check(nvml::Return result, const char* function) const;

  void* handle_;
  std::string path_;
  std::unique_ptr<Functions> fn_;
};

}  // namespace trainpack
