#pragma once
// A module with one kernel, `noop`, for the API tests.

namespace fakegpu_test {

inline constexpr const char* kNoopPtx = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .entry noop()
{
  ret;
}
)";

}  // namespace fakegpu_test
