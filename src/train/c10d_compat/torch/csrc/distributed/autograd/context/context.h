// A stand-in for a header that LibTorch's C++ distribution does not install (PyTorch's
// torch/csrc/distributed/autograd/context/context.h, the distributed-autograd context of the RPC
// framework), so that c10d's reducer.hpp (DistributedDataParallel's gradient reducer) compiles.
//
// reducer.hpp needs only two names from it: DistAutogradContext::GradCallback (in a static_assert
// that it is std::function<bool(at::Tensor&)>) and ContextPtr (a shared_ptr held by the reducer's
// RpcContext, which stays null because trainpack never uses distributed autograd). A
// std::shared_ptr has the same layout whatever it points to, so the reducer compiled into
// libtorch and the code that includes this header agree on the object's layout.
//
// CMake adds this directory to the include path only when the LibTorch in use lacks the real
// header (CMakeLists.txt, "c10d_compat").
#pragma once

#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
