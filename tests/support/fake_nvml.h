// The tests' handle on the fake NVML library (tests/utils/fake_nvml): loads it with dlopen, as
// trainpack's Nvml does (the same path gives the same loaded library, so both see one state),
// resolves its control functions and resets it.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace trainpack::testing {

class FakeNvml {
 public:
  static constexpr const char* kPath = TRAINPACK_FAKE_NVML;
  static constexpr const char* kPartialPath = TRAINPACK_FAKE_NVML_PARTIAL;

  FakeNvml() {
    handle_ = dlopen(kPath, RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      ADD_FAILURE() << "cannot load " << kPath << ": " << dlerror();
      return;
    }
    resolve("fake_nvml_reset", reset_);
    resolve("fake_nvml_set_device_count", set_device_count_);
    resolve("fake_nvml_set_init_result", set_init_result_);
    resolve("fake_nvml_set_utilization_result", set_utilization_result_);
    resolve("fake_nvml_set_gated", set_gated_);
    resolve("fake_nvml_push", push_);
    resolve("fake_nvml_served", served_);
    resolve("fake_nvml_wait_next_call", wait_next_call_);
    resolve("fake_nvml_initialized", initialized_);
    reset_();
  }
  ~FakeNvml() {
    if (handle_) dlclose(handle_);
  }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;

  void set_device_count(unsigned n) { set_device_count_(n); }
  void set_init_result(int r) { set_init_result_(r); }
  void set_utilization_result(int r) { set_utilization_result_(r); }
  // Gated (the default): a sample waits for a pushed value. Ungated: it returns the last one.
  void set_gated(bool gated) { set_gated_(gated ? 1 : 0); }
  // The next utilization a sample of `device` returns.
  void push(unsigned device, unsigned gpu) { push_(device, gpu); }
  unsigned long served() { return served_(); }
  // Waits until `count` samples were served and the next call has begun.
  bool wait_next_call(unsigned long count) { return wait_next_call_(count) != 0; }
  int initialized() { return initialized_(); }

 private:
  template <typename Fn>
  void resolve(const char* name, Fn& out) {
    void* symbol = dlsym(handle_, name);
    if (!symbol) ADD_FAILURE() << kPath << " has no " << name;
    out = reinterpret_cast<Fn>(symbol);
  }

  void* handle_ = nullptr;
  void (*reset_)() = nullptr;
  void (*set_device_count_)(unsigned) = nullptr;
  void (*set_init_result_)(int) = nullptr;
  void (*set_utilization_result_)(int) = nullptr;
  void (*set_gated_)(int) = nullptr;
  void (*push_)(unsigned, unsigned) = nullptr;
  unsigned long (*served_)() = nullptr;
  int (*wait_next_call_)(unsigned long) = nullptr;
  int (*initialized_)() = nullptr;
};

// Sets (or with nullopt unsets) an environment variable while it lives, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) {
      setenv(name_.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace trainpack::testing
