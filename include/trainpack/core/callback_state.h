// Writing a callback's state() and load_state() (core/callback.h): the way to build a
// CallbackState and to read one back with the checks every load_state makes. A state that does
// not fit is std::invalid_argument naming the callback and the entry. docs/save-load.md shows a
// callback that uses them.
//
// Conventions (docs/save-load.md): scalars are 0-d CPU tensors, int64 for steps and counts,
// float64 for values; sequences are 1-d CPU tensors of the same dtypes; a string (an id a
// service gave, e.g. an experiment key) is a 1-d int64 tensor of its bytes (state_string).
#pragma once

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainpack/core/callback.h"

namespace trainpack {

// Entries: 0-d scalars and 1-d vectors, int64 or float64, on the CPU.
inline at::Tensor state_scalar(int64_t v) { return at::scalar_tensor(v, at::kLong); }
inline at::Tensor state_scalar(double v) { return at::scalar_tensor(v, at::kDouble); }
inline at::Tensor state_vector(const std::vector<int64_t>& v) {
  return at::tensor(v, at::kLong).reshape({static_cast<int64_t>(v.size())});
}
inline at::Tensor state_vector(const std::vector<double>& v) {
  return at::tensor(v, at::kDouble).reshape({static_cast<int64_t>(v.size())});
}

// A string as a 1-d int64 tensor of its bytes (each 0..255), read back by
// state_string(who, state, key).
inline at::Tensor state_string(const std::string& s) {
  std::vector<int64_t> bytes;
  bytes.reserve(s.size());
  for (const char c : s) bytes.push_back(static_cast<unsigned char>(c));
  return at::tensor(bytes, at::kLong).reshape({static_cast<int64_t>(bytes.size())});
}

// The entry `key`, or nullptr when the state has none.
inline const at::Tensor* find_state(const CallbackState& state, const std::string& key) {
  auto it = state.find(key);
  return it == state.end() ? nullptr : &it->second;
}

// The entry `key`; a missing or undefined one is std::invalid_argument naming `who` and `key`.
inline const at::Tensor& require_state(const std::string& who, const CallbackState& state,
                                       const std::string& key) {
  const at::Tensor* t = find_state(state, key);
  if (t == nullptr || !t->defined()) {
    throw std::invalid_argument(fmt::format(
        "{}: the saved state has no entry '{}'; it was not saved by this callback (a different "
        "callback of the same name, or another version)",
        who, key));
  }
  return *t;
}

namespace detail {
inline void check_state_kind(const std::string& who, const std::string& key, const at::Tensor& t,
                             bool integral, int64_t dim) {
  const bool kind_ok = integral ? at::isIntegralType(t.scalar_type(), /*includeBool=*/false)
                                : at::isFloatingType(t.scalar_type());
  if (!kind_ok || t.dim() != dim) {
    throw std::invalid_argument(fmt::format(
        "{}: the saved state entry '{}' should be a {} {} tensor, but it is a {}-d {} tensor", who,
        key, dim == 0 ? "0-d" : "1-d", integral ? "int64" : "float64", t.dim(),
        c10::toString(t.scalar_type())));
  }
}
}  // namespace detail

// A 0-d integer entry (a step, a count).
inline int64_t state_int(const std::string& who, const CallbackState& state,
                         const std::string& key) {
  const at::Tensor& t = require_state(who, state, key);
  detail::check_state_kind(who, key, t, /*integral=*/true, 0);
  return t.item<int64_t>();
}

// A 0-d floating entry (a value).
inline double state_double(const std::string& who, const CallbackState& state,
                           const std::string& key) {
  const at::Tensor& t = require_state(who, state, key);
  detail::check_state_kind(who, key, t, /*integral=*/false, 0);
  return t.item<double>();
}

// A 1-d integer entry.
inline std::vector<int64_t> state_ints(const std::string& who, const CallbackState& state,
                                       const std::string& key) {
  const at::Tensor& t = require_state(who, state, key);
  detail::check_state_kind(who, key, t, /*integral=*/true, 1);
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

// A 1-d floating entry.
inline std::vector<double> state_doubles(const std::string& who, const CallbackState& state,
                                         const std::string& key) {
  const at::Tensor& t = require_state(who, state, key);
  detail::check_state_kind(who, key, t, /*integral=*/false, 1);
  const at::Tensor c = t.to(at::kCPU, at::kDouble).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// A string entry (state_string(s)); a byte outside 0..255 is std::invalid_argument naming `who`
// and `key`.
inline std::string state_string(const std::string& who, const CallbackState& state,
                                const std::string& key) {
  std::string out;
  for (const int64_t b : state_ints(who, state, key)) {
    if (b < 0 || b > 255) {
      throw std::invalid_argument(fmt::format(
          "{}: the saved state entry '{}' should hold the bytes of a string (0..255), but it "
          "holds {}",
          who, key, b));
    }
    out.push_back(static_cast<char>(static_cast<unsigned char>(b)));
  }
  return out;
}

// Every entry of `state` must be one of `keys`: anything else is std::invalid_argument naming
// `who`, the entry and the entries this callback saves.
inline void check_state_keys(const std::string& who, const CallbackState& state,
                             std::initializer_list<const char*> keys) {
  for (const auto& kv : state) {
    bool known = false;
    for (const char* k : keys) known = known || kv.first == k;
    if (known) continue;
    std::string list;
    for (const char* k : keys) list += list.empty() ? std::string(k) : ", " + std::string(k);
    throw std::invalid_argument(fmt::format(
        "{}: the saved state has an entry '{}' that this callback does not save ({}); it comes "
        "from a different callback of the same name, or another version",
        who, kv.first, list.empty() ? "it saves nothing" : "its entries: " + list));
  }
}

}  // namespace trainpack
