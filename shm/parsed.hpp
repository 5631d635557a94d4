// A tiny value-or-error result for the pure parsers of shm/ (g++ 12 has no
// std::expected). Parsers never throw: the shim calls them from inside CUDA
// entry points, where an escaping exception would abort the tenant.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace cushare::shm {

template <class T>
class Parsed {
 public:
  static Parsed ok(T value) {
    Parsed p;
    p.value_.emplace(std::move(value));
    return p;
  }
  static Parsed fail(std::string message) { return Parsed(Error{}, std::move(message)); }

  bool has_value() const { return value_.has_value(); }
  explicit operator bool() const { return value_.has_value(); }
  // Precondition: has_value().
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  const T* operator->() const { return &*value_; }
  // Empty when has_value().
  const std::string& error() const { return error_; }

 private:
  struct Error {};
  Parsed() = default;
  Parsed(Error, std::string message) : error_(std::move(message)) {}
  std::optional<T> value_;
  std::string error_;
};

}  // namespace cushare::shm
