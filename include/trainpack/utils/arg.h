// TRAINPACK_LIST_ARG: an options field holding an optional list, where "unset" and "an empty
// list" mean different things (TrainOptions().extra_callbacks: unset is the default callbacks,
// an empty list is none).
//
// TORCH_ARG(std::optional<std::vector<T>>, name) cannot say that: `name({})` value-initializes
// the optional, i.e. leaves it unset, and `name({"^a"})` does not compile. The setters made here
// take the list itself, so `{}` is an empty list and `{"^a"}` a list of one:
//
//   struct ScalarPrinterOptions { TRAINPACK_LIST_ARG(std::string, whitelist); };
//   ScalarPrinterOptions().whitelist({"^val"});   // set: these patterns
//   ScalarPrinterOptions().whitelist({});         // set: an empty list
//   ScalarPrinterOptions().whitelist(std::nullopt); // unset again (the default)
//
// An std::optional<std::vector<T>> is taken as it is (so one options struct can forward another's
// field); the getters return the optional, as TORCH_ARG's do.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#define TRAINPACK_LIST_ARG(T, name)                                                              \
 public:                                                                                         \
  inline auto name(std::vector<T> new_##name)->decltype(*this) { /* NOLINT */                    \
    this->name##_ = std::move(new_##name);                                                       \
    return *this;                                                                                \
  }                                                                                              \
  inline auto name(std::nullopt_t)->decltype(*this) { /* NOLINT */                               \
    this->name##_.reset();                                                                       \
    return *this;                                                                                \
  }                                                                                              \
  /* A template, so that `name({})` does not find it: braces deduce nothing. */                  \
  template <typename Optional,                                                                   \
            std::enable_if_t<                                                                    \
                std::is_same_v<std::decay_t<Optional>, std::optional<std::vector<T>>>, int> = 0> \
  inline auto name(Optional&& new_##name)->decltype(*this) { /* NOLINT */                        \
    this->name##_ = std::forward<Optional>(new_##name);                                          \
    return *this;                                                                                \
  }                                                                                              \
  inline const std::optional<std::vector<T>>& name() const noexcept { /* NOLINT */               \
    return this->name##_;                                                                        \
  }                                                                                              \
  inline std::optional<std::vector<T>>& name() noexcept { /* NOLINT */                           \
    return this->name##_;                                                                        \
  }                                                                                              \
                                                                                                 \
 private:                                                                                        \
  std::optional<std::vector<T>> name##_ /* NOLINT */

// TRAINPACK_ARG: LibTorch's TORCH_ARG (a field with a chainable setter and a getter), for the
// options of the parts of trainpack that are built without LibTorch's headers (the event-file
// writer, which must not see the protobuf headers that some LibTorch packages ship).
#define TRAINPACK_ARG(T, name)                                          \
 public:                                                                \
  inline auto name(const T& new_##name)->decltype(*this) { /* NOLINT */ \
    this->name##_ = new_##name;                                         \
    return *this;                                                       \
  }                                                                     \
  inline auto name(T&& new_##name)->decltype(*this) { /* NOLINT */      \
    this->name##_ = std::move(new_##name);                              \
    return *this;                                                       \
  }                                                                     \
  inline const T& name() const noexcept { /* NOLINT */                  \
    return this->name##_;                                               \
  }                                                                     \
  inline T& name() noexcept { /* NOLINT */                              \
    return this->name##_;                                               \
  }                                                                     \
                                                                        \
 private:                                                               \
  T name##_ /* NOLINT */
