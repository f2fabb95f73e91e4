#include "trainpack/utils/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <utility>

namespace trainpack {

// The signatures of nvml.h's functions (all `extern "C"`, returning nvmlReturn_t).
struct Nvml::Functions {
  nvml::Return (*init)() = nullptr;                                         // nvmlInit_v2
  nvml::Return (*shutdown)() = nullptr;                                     // nvmlShutdown
  nvml::Return (*device_count)(unsigned*) = nullptr;                        // nvmlDeviceGetCount_v2
  nvml::Return (*handle_by_index)(unsigned, nvml::Device*) = nullptr;       // ..GetHandleByIndex_v2
  nvml::Return (*utilization)(nvml::Device, nvml::Utilization*) = nullptr;  // ..UtilizationRates
  const char* (*error_string)(nvml::Return) = nullptr;                      // nvmlErrorString
};

namespace {

std::string loader_error() {
  const char* e = dlerror();
  return e ? e : "unknown error";
}

template <typename Fn>
void resolve(void* handle, const std::string& path, const char* name, Fn& out) {
  dlerror();  // clear a stale message
  void* symbol = dlsym(handle, name);
  if (!symbol) {
    const std::string why = loader_error();
    dlclose(handle);
    throw NvmlError(fmt::format("{} has no function {}: {}", path, name, why));
  }
  out = reinterpret_cast<Fn>(symbol);
}

}  // namespace

std::string Nvml::library_path(const std::string& path) {
  if (!path.empty()) return path;
  const char* env = std::getenv(kLibraryVariable);
  if (env && *env) return env;
  return kDefaultLibrary;
}

std::unique_ptr<Nvml> Nvml::open(const std::string& path) {
  const std::string lib = library_path(path);
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw NvmlError(fmt::format("cannot load {}: {}", lib, loader_error()));
  auto fn = std::make_unique<Functions>();
  resolve(handle, lib, "nvmlInit_v2", fn->init);
  resolve(handle, lib, "nvmlShutdown", fn->shutdown);
  resolve(handle, lib, "nvmlDeviceGetCount_v2", fn->device_count);
  resolve(handle, lib, "nvmlDeviceGetHandleByIndex_v2", fn->handle_by_index);
  resolve(handle, lib, "nvmlDeviceGetUtilizationRates", fn->utilization);
  resolve(handle, lib, "nvmlErrorString", fn->error_string);
  const nvml::Return r = fn->init();
  if (r != nvml::kSuccess) {
    const char* text = fn->error_string(r);
    std::string message = fmt::format("nvmlInit_v2 failed: {}", text ? text : "unknown error");
    dlclose(handle);
    throw NvmlError(message);
  }
  return std::unique_ptr<Nvml>(new Nvml(handle, lib, std::move(fn)));
}

Nvml::Nvml(void* handle, std::string path, std::unique_ptr<Functions> functions)
    : handle_(handle), path_(std::move(path)), fn_(std::move(functions)) {}

Nvml::~Nvml() {
  fn_->shutdown();
  dlclose(handle_);
}

std::string Nvml::error_string(nvml::Return result) const {
  const char* text = fn_->error_string(result);
  return text ? text : fmt::format("NVML error {}", result);
}

void Nvml::check(nvml::Return result, const char* function) const {
  if (result != nvml::kSuccess) {
    throw NvmlError(fmt::format("{} failed: {}", function, error_string(result)));
  }
}

unsigned Nvml::device_count() const {
  unsigned count = 0;
  check(fn_->device_count(&count), "nvmlDeviceGetCount_v2");
  return count;
}

nvml::Device Nvml::device(unsigned index) const {
  nvml::Device device = nullptr;
  const nvml::Return r = fn_->handle_by_index(index, &device);
  if (r != nvml::kSuccess) {
    throw NvmlError(
        fmt::format("nvmlDeviceGetHandleByIndex_v2({}) failed: {}", index, error_string(r)));
  }
  return device;
}

unsigned Nvml::gpu_utilization(nvml::Device device) const {
  nvml::Utilization u{};
  check(fn_->utilization(device, &u), "nvmlDeviceGetUtilizationRates");
  return u.gpu;
}

}  // namespace trainpack
