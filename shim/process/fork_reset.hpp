// What a fork child must not inherit: the parent's pointer tables, pools,
// contexts, launch trackers and process slot are not the child's. The shim
// has one pthread_atfork, installed with the first registration (never at
// load: a process that never uses CUDA gets none); each part that keeps such
// state registers its handlers once, and they run in a defined order.
#pragma once

#include <cstdint>

namespace cushare::shim {

// The order fork children run the handlers in.
enum class ForkStage : std::uint8_t {
  kAccounting,  // memory charges the parent made (accounting/)
  kGate,        // launch trackers and demand: no thread of the child waits anywhere (gate/)
  kAllocation,  // last: the parent's slot is dropped; the child claims its own (process/)
};

using ForkHandler = void (*)() noexcept;

// Registers `child` to run in every fork child, and `prepare` / `parent`
// (either may be null) around the fork in the forking thread. Children and
// parents run in stage order, prepares in reverse (pthread_atfork's
// convention: what is locked last is unlocked first); within a stage, in
// registration order. Register once (a part's std::call_once or its
// initialisation); the same handlers registered again later do nothing.
// Thread-safe, lock-free, and callable while holding a lock that `prepare`
// takes.
void on_fork(ForkStage stage, ForkHandler child, ForkHandler prepare = nullptr,
             ForkHandler parent = nullptr) noexcept;

}  // namespace cushare::shim
