// The one place where trainpack's code differs between LibTorch versions.
//
// trainpack builds against every LibTorch from 1.13 (Debian 12) to the newest (2.14 when this was
// written; pytorch.org's archives and pip's wheels, CPU and CUDA). Where an API moved, the code
// calls the wrapper below instead of the API, so that the version tests live here and nowhere
// else. The version is one number, TRAINPACK_TORCH_VERSION = major * 100 + minor (2.4 -> 204).
//
// What differs, and since when:
// - 2.0: c10d's ProcessGroupGloo and ProcessGroupNCCL are c10d::Backends, held by a
//   c10d::ProcessGroup that dispatches each collective to the backend of the tensors' device;
//   before, they were ProcessGroups themselves (wrap_backend).
// - 2.0: ATen has fused Adam and AdamW kernels (_fused_adam_, _fused_adamw_; 1.13 has the first
//   only), which a CUDA graph captures Adam and AdamW through (kHasFusedAdam, fused_adam_,
//   fused_adamw_).
// - 2.4: autocast's per-device functions (is_cpu_enabled, set_autocast_gpu_dtype, ...) are
//   deprecated in favour of the device-type ones (is_autocast_enabled(device), ...) (autocast_*).
// - 2.x: torch::optim::Optimizer::state() is keyed by a parameter's TensorImpl address; before,
//   by that address as a string (optimizer_state_key).
// - 2.x: CUDAHooksInterface::getDefaultCUDAGenerator became getDefaultGenerator
//   (default_cuda_generator).
// - 2.x: c10d::Reducer's constructor changed its arguments (make_reducer).
// - 2.4: a TCPStore uses libuv unless told otherwise (use_classic_tcp_store).
// - 2.13: ATen's headers need C++20 (std::strong_ordering, requires-clauses); the build picks the
//   standard from the LibTorch it finds, and this header says so if a consumer's does not.
//
// Internal: users do not call these; they may change in any release.
#pragma once

#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/version.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#define TRAINPACK_TORCH_VERSION (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)

#if TRAINPACK_TORCH_VERSION >= 213 && __cplusplus < 202002L
#error "LibTorch 2.13 and later need C++20: build with -std=c++20 (CMAKE_CXX_STANDARD 20)"
#endif

#include <ATen/core/Tensor.h>
#if TRAINPACK_TORCH_VERSION >= 200
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#endif

namespace trainpack::compat {

// ---- the version, as messages name it ----

// The LibTorch built against, "major.minor" ("1.13", "2.11").
inline std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

// ---- autocast: the state of one device type (CPU or CUDA) ----

inline bool autocast_enabled(c10::DeviceType device) {
#if TRAINPACK_TORCH_VERSION >= 204
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device, bool enabled) {
#if TRAINPACK_TORCH_VERSION >= 204
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

inline c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if TRAINPACK_TORCH_VERSION >= 204
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType device, c10::ScalarType dtype) {
#if TRAINPACK_TORCH_VERSION >= 204
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

// ---- the default random generator of one CUDA device ----
//
// CUDAHooksInterface::getDefaultCUDAGenerator became getDefaultGenerator when the hooks of all
// accelerators got one interface (2.x; Debian 13's 2.6 has only the new name). The exact release
// is not pinned down, so the member that exists is picked by overload resolution, not by version.

namespace detail {
template <class Hooks>
auto default_generator(const Hooks& hooks, c10::DeviceIndex device, int)
    -> decltype(hooks.getDefaultGenerator(device)) {
  return hooks.getDefaultGenerator(device);
}
template <class Hooks>
const at::Generator& default_generator(const Hooks& hooks, c10::DeviceIndex device, long) {
  return hooks.getDefaultCUDAGenerator(device);
}
}  // namespace detail

inline const at::Generator& default_cuda_generator(c10::DeviceIndex device) {
  return detail::default_generator(at::detail::getCUDAHooks(), device, 0);
}

// ---- the key of a parameter in torch::optim::Optimizer::state() ----
//
// LibTorch 1.x keys the map by the parameter's TensorImpl address as a string (what
// c10::guts::to_string gives: the pointer streamed), 2.x by the address itself. `StateMap` is the
// map's type (decltype(optimizer.state()), decayed), so that this header needs no optimizer
// header; the key is picked by that type, as the release that changed it is not pinned down.
template <class StateMap>
typename StateMap::key_type optimizer_state_key(const at::Tensor& param) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream s;
    s << param.unsafeGetTensorImpl();
    return s.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

// ---- ATen's fused Adam and AdamW kernels ----
//
// One step of Adam (fused_adam_) or AdamW (fused_adamw_) over a list of parameters, in place on
// them and on their moments, with the step counts as device tensors (which the kernel reads, not
// advances): what a CUDA graph captures for torch::optim::Adam and AdamW, whose own steps count on
// the host. Both kernels exist from 2.0 (kHasFusedAdam); on older versions the functions throw
// std::logic_error, and callers check kHasFusedAdam first (cuda_graph_refusal refuses Adam and
// AdamW there).

inline constexpr bool kHasFusedAdam = TRAINPACK_TORCH_VERSION >= 200;

#if TRAINPACK_TORCH_VERSION >= 200
inline void fused_adam_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                        at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                        at::TensorList steps, double lr, double beta1, double beta2,
                        double weight_decay, double eps, bool amsgrad, bool maximize) {
  at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2,
                   weight_decay, eps, amsgrad, maximize);
}
inline void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                         at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                         at::TensorList steps, double lr, double beta1, double beta2,
                         double weight_decay, double eps, bool amsgrad, bool maximize) {
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2,
                    weight_decay, eps, amsgrad, maximize);
}
#else
namespace detail {
[[noreturn]] inline void no_fused_adam(const char* kernel) {
  throw std::logic_error(std::string("trainpack::compat::") + kernel + ": LibTorch " +
                         torch_version() +
                         " has no fused Adam kernels (2.0 and later have them); check "
                         "compat::kHasFusedAdam first");
}
}  // namespace detail
inline void fused_adam_(at::TensorList, at::TensorList, at::TensorList, at::TensorList,
                        at::TensorList, at::TensorList, double, double, double, double, double,
                        bool, bool) {
  detail::no_fused_adam("fused_adam_");
}
inline void fused_adamw_(at::TensorList, at::TensorList, at::TensorList, at::TensorList,
                         at::TensorList, at::TensorList, double, double, double, double, double,
                         bool, bool) {
  detail::no_fused_adam("fused_adamw_");
}
#endif

// ---- c10d: a collective backend as the process group that the Reducer and comm.hpp take ----
//
// A template, so that this header does not pull c10d (and Gloo's headers) into every unit: the
// c10d types are named by the one caller that includes them (src/core/process_group.cpp).
// `gloo` says which backend it is: Gloo serves CPU and CUDA tensors, NCCL CUDA tensors only.
template <class ProcessGroupT, class BackendT>
c10::intrusive_ptr<ProcessGroupT> wrap_backend(c10::intrusive_ptr<BackendT> backend, int rank,
                                               int size, bool gloo) {
#if TRAINPACK_TORCH_VERSION >= 200
  // As torch.distributed does for a new group: a ProcessGroup that routes each device type's
  // collectives to its backend.
  auto group = c10::make_intrusive<ProcessGroupT>(rank, size);
  const auto type = gloo ? ProcessGroupT::BackendType::GLOO : ProcessGroupT::BackendType::NCCL;
  group->setDefaultBackend(type);
  if (gloo) group->setBackend(c10::DeviceType::CPU, type, backend);
  group->setBackend(c10::DeviceType::CUDA, type, backend);
  return group;
#else
  (void)rank;
  (void)size;
  (void)gloo;
  return backend;
#endif
}

// ---- c10d: the TCPStore's transport ----
//
// From 2.4 a TCPStore uses libuv by default, which not every LibTorch is built with (Debian's is
// not: "use_libuv was requested but PyTorch was built without libuv support"). trainpack asks for
// the classic transport, which every version has and which talks to a libuv store too.
namespace detail {
template <class Options>
auto disable_libuv(Options& options, int) -> decltype(options.useLibUV, void()) {
  options.useLibUV = false;
}
template <class Options>
void disable_libuv(Options&, long) {}
}  // namespace detail

template <class TCPStoreOptions>
void use_classic_tcp_store(TCPStoreOptions& options) {
  detail::disable_libuv(options, 0);
}

// ---- c10d: DDP's gradient Reducer ----
//
// Its constructor took per-bucket size limits after the bucket indices up to 2.x; newer releases
// (2.11, 2.14) take no such list there but three more arguments at the end (skip all-reduce of
// unused parameters, the Python reducer, per-bucket byte caps: off, off and none, as DDP's
// defaults). The form that compiles is picked, as for the generator above; a LibTorch with a
// third form stops the build here, naming this function.
template <class Reducer, class ProcessGroupPtr>
std::unique_ptr<Reducer> make_reducer(std::vector<at::Tensor> params,
                                      std::vector<std::vector<size_t>> bucket_indices,
                                      std::vector<size_t> per_bucket_size_limits,
                                      ProcessGroupPtr process_group,
                                      std::vector<bool> expect_sparse_gradients,
                                      int64_t bucket_bytes_cap, bool find_unused_parameters,
                                      std::unordered_map<size_t, std::string> param_names,
                                      int64_t first_bucket_bytes_cap) {
  using Tensors = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<size_t>>;
  using Names = std::unordered_map<size_t, std::string>;
  constexpr bool kGradientAsBucketView = false;
  if constexpr (std::is_constructible_v<Reducer, Tensors, Buckets, std::vector<size_t>,
                                        ProcessGroupPtr, std::vector<bool>, int64_t, bool, bool,
                                        Names, int64_t>) {
    return std::make_unique<Reducer>(std::move(params), std::move(bucket_indices),
                                     std::move(per_bucket_size_limits), std::move(process_group),
                                     std::move(expect_sparse_gradients), bucket_bytes_cap,
                                     find_unused_parameters, kGradientAsBucketView,
                                     std::move(param_names), first_bucket_bytes_cap);
  } else if constexpr (std::is_constructible_v<Reducer, Tensors, Buckets, ProcessGroupPtr,
                                               std::vector<bool>, int64_t, bool, bool, Names,
                                               int64_t, bool, bool, std::vector<int64_t>>) {
    return std::make_unique<Reducer>(
        std::move(params), std::move(bucket_indices), std::move(process_group),
        std::move(expect_sparse_gradients), bucket_bytes_cap, find_unused_parameters,
        kGradientAsBucketView, std::move(param_names), first_bucket_bytes_cap,
        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
        /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
  } else {
    static_assert(sizeof(Reducer) == 0,
                  "trainpack::compat::make_reducer: this LibTorch's c10d::Reducer has a "
                  "constructor trainpack does not know; add its form here");
  }
}

}  // namespace trainpack::compat
