// A stand-in for NVIDIA's libnvidia-ml.so.1, built by the tests (trainpack_fake_nvml): the six
// functions of nvml.h that trainpack's Nvml resolves, with behaviour the tests script through the
// control functions below (which they resolve with dlsym on the same library). Built with
// FAKE_NVML_WITHOUT_UTILIZATION (trainpack_fake_nvml_partial) it lacks
// nvmlDeviceGetUtilizationRates, as an old or broken driver library might.
//
// Utilizations: each device has a queue of values, filled by fake_nvml_push. A call of
// nvmlDeviceGetUtilizationRates takes the next value of its device; when the queue is empty it
// waits for one (at most 20 s, then NVML_ERROR_TIMEOUT), so a test decides exactly which values
// each sample sees. fake_nvml_set_gated(0) makes empty queues return the last value at once.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>

namespace {

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kTimeout = 10;
constexpr unsigned kMaxDevices = 16;

struct Device {
  unsigned index;
};
struct Utilization {
  unsigned gpu;
  unsigned memory;
};

struct State {
  std::mutex mutex;
  std::condition_variable cv;
  unsigned device_count = 2;
  int init_result = kSuccess;
  int utilization_result = kSuccess;
  bool gated = true;
  int initialized = 0;  // nvmlInit_v2 calls minus nvmlShutdown calls
  unsigned long served = 0;
  int waiting = 0;  // calls of nvmlDeviceGetUtilizationRates in progress
  std::deque<unsigned> queue[kMaxDevices];
  unsigned last[kMaxDevices] = {};
  Device devices[kMaxDevices];
  State() {
    for (unsigned i = 0; i < kMaxDevices; ++i) devices[i].index = i;
  }
};

State& state() {
  static State s;
  return s;
}

}  // namespace

extern "C" {

// ---- nvml.h ----

int nvmlInit_v2() {
  std::lock_guard<std::mutex> lock(state().mutex);
  if (state().init_result != kSuccess) return state().init_result;
  ++state().initialized;
  return kSuccess;
}

int nvmlShutdown() {
  std::lock_guard<std::mutex> lock(state().mutex);
  if (state().initialized == 0) return kUninitialized;
  --state().initialized;
  return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  std::lock_guard<std::mutex> lock(state().mutex);
  if (state().initialized == 0) return kUninitialized;
  *count = state().device_count;
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, Device** device) {
  std::lock_guard<std::mutex> lock(state().mutex);
  if (state().initialized == 0) return kUninitialized;
  if (index >= state().device_count || index >= kMaxDevices) return kInvalidArgument;
  *device = &state().devices[index];
  return kSuccess;
}

#ifndef FAKE_NVML_WITHOUT_UTILIZATION
int nvmlDeviceGetUtilizationRates(Device* device, Utilization* utilization) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  if (s.initialized == 0) return kUninitialized;
  if (s.utilization_result != kSuccess) return s.utilization_result;
  const unsigned i = device->index;
  ++s.waiting;
  s.cv.notify_all();
  const bool ready = s.cv.wait_for(lock, std::chrono::seconds(20), [&] {
    return !s.queue[i].empty() || !s.gated || s.utilization_result != kSuccess;
  });
  --s.waiting;
  if (!ready) return kTimeout;
  if (s.utilization_result != kSuccess) return s.utilization_result;
  if (!s.queue[i].empty()) {
    s.last[i] = s.queue[i].front();
    s.queue[i].pop_front();
  }
  utilization->gpu = s.last[i];
  utilization->memory = 0;
  ++s.served;
  s.cv.notify_all();
  return kSuccess;
}
#endif

const char* nvmlErrorString(int result) {
  switch (result) {
    case kSuccess:
      return "Success";
    case kUninitialized:
      return "Uninitialized";
    case kInvalidArgument:
      return "Invalid Argument";
    case 9:
      return "Driver Not Loaded";
    case kTimeout:
      return "Timeout";
    default:
      return "Unknown Error";
  }
}

// ---- control, for the tests ----

// Back to the defaults: 2 devices, every call succeeds, gated, empty queues, nothing served.
void fake_nvml_reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.device_count = 2;
  s.init_result = kSuccess;
  s.utilization_result = kSuccess;
  s.gated = true;
  s.served = 0;
  for (unsigned i = 0; i < kMaxDevices; ++i) {
    s.queue[i].clear();
    s.last[i] = 0;
  }
  s.cv.notify_all();
}

void fake_nvml_set_device_count(unsigned count) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().device_count = count;
}

// What nvmlInit_v2 returns (an nvmlReturn_t).
void fake_nvml_set_init_result(int result) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().init_result = result;
}

// What nvmlDeviceGetUtilizationRates returns; an error wakes the calls that wait.
void fake_nvml_set_utilization_result(int result) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().utilization_result = result;
  state().cv.notify_all();
}

void fake_nvml_set_gated(int gated) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().gated = gated != 0;
  state().cv.notify_all();
}

// Queues the utilization that the next call for `device` returns.
void fake_nvml_push(unsigned device, unsigned gpu) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().queue[device % kMaxDevices].push_back(gpu);
  state().cv.notify_all();
}

// How many nvmlDeviceGetUtilizationRates calls returned a value.
unsigned long fake_nvml_served() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().served;
}

// Waits until at least `count` calls returned a value (at most 20 s); returns whether they did.
int fake_nvml_wait_served(unsigned long count) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  return s.cv.wait_for(lock, std::chrono::seconds(20), [&] { return s.served >= count; }) ? 1 : 0;
}

// Waits until at least `count` calls returned a value and the next call has begun (its caller is
// then past everything it does after a sample); at most 20 s. Returns whether that happened.
int fake_nvml_wait_next_call(unsigned long count) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  return s.cv.wait_for(lock, std::chrono::seconds(20),
                       [&] { return s.served >= count && s.waiting > 0; })
             ? 1
             : 0;
}

// nvmlInit_v2 calls not yet matched by nvmlShutdown.
int fake_nvml_initialized() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().initialized;
}

}  // extern "C"
