// Declarations of every function the shim exports, with the exact ABI from
// the X-lists of real_driver.hpp: a wrapper whose definition disagrees with
// its PFN_ type fails to compile.
#pragma once

#include <type_traits>

#include "shim/driver/real_driver.hpp"

#define CUSHARE_EXPORT __attribute__((visibility("default")))

// cuLaunchCooperativeKernelMultiDevice is deprecated but still exported and hooked.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
extern "C" {
#define CUSHARE_DECLARE(sym, type, need) CUSHARE_EXPORT std::remove_pointer_t<type> sym;
CUSHARE_HOOKED_DRIVER_FUNCTIONS(CUSHARE_DECLARE)
CUSHARE_HOOKED_NVML_FUNCTIONS(CUSHARE_DECLARE)
#undef CUSHARE_DECLARE
}
#pragma GCC diagnostic pop
