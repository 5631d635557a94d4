// Per-process state that a fork child must drop (the parent's pointer
// tables, pool and context records are not the child's): the pthread_atfork
// child handler of allocation_state.cpp calls this before the child claims
// its own process slot. Implemented by the accounting module.
#pragma once

namespace cushare::shim {

void run_fork_child_hooks() noexcept;

}  // namespace cushare::shim
