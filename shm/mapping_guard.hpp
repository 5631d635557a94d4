// Keeps node processes alive when a tenant truncates a region file under them.
//
// Every process of an allocation may write its `usage` file (mode 0666, by
// design), so a tenant can also truncate it. Any later access to a page of a
// MAP_SHARED mapping past the new end of the file raises SIGBUS, which would
// kill the daemon (or the device plugin, or cusharectl) serving every other
// tenant of the node. Processes that map tenants' regions install this guard:
// a SIGBUS inside a registered mapping replaces the faulting page with a
// private zero page, so the access completes harmlessly, and marks the
// mapping damaged; its owner then drops it (RegionMapping::damaged()). A
// SIGBUS anywhere else is handled as before the guard (previous handler, or
// the default action: the process dies).
//
// The shim never installs it: a tenant process keeps its own signal
// dispositions, and a tenant that truncates its own region hurts only itself.
#pragma once

#include <cstddef>

namespace cushare::shm {

// Idempotent, thread-safe. Region mappings made before the call are not
// guarded; install it first thing in main().
void install_mapping_guard();
bool mapping_guard_installed() noexcept;

namespace guard_detail {
// For RegionMapping: a token (>= 0) when the guard is installed and a slot
// was free, else -1 (unguarded). At most kMaxGuardedMappings at once.
inline constexpr int kMaxGuardedMappings = 8192;
int register_mapping(const void* base, std::size_t length) noexcept;
void unregister_mapping(int token) noexcept;
bool damaged(int token) noexcept;
}  // namespace guard_detail

}  // namespace cushare::shm
