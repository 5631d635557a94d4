// A call of the real driver, passed by reference to code that decides
// whether and when to make it (the accounting around an allocation). Not
// owning and never allocating: it refers to a callable (usually the hook's
// lambda, a temporary that lives until the hook's call returns), so it must
// not outlive the call it is passed to.
#pragma once

#include <memory>
#include <type_traits>

#include "shim/driver/cuda_api.hpp"

namespace cushare::shim {

class DriverCall {
 public:
  // The requires clause keeps copies and moves away from it (clang-tidy 14
  // does not read requires clauses).
  template <class F>
  // NOLINTNEXTLINE(bugprone-forwarding-reference-overload)
  requires(!std::is_same_v<std::remove_cvref_t<F>, DriverCall>) DriverCall(F&& f)
  noexcept  // NOLINT(google-explicit-constructor): a hook's lambda converts
      : target_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        invoke_([](void* t) { return (*static_cast<std::remove_reference_t<F>*>(t))(); }) {}

  CUresult operator()() const { return invoke_(target_); }

 private:
  void* target_;
  CUresult (*invoke_)(void*);
};

}  // namespace cushare::shim
