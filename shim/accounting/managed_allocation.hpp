// Managed allocations: made by the device plugin or `cusharectl create`, whose
// `limits` file is bind-mounted read-only into the container. The shim finds
// one through the kernel's mount table (/proc/self/mountinfo), which a tenant
// cannot write, not through its environment or its file system, which it can:
// a container's root may replace /var/run by a symbolic link, but it cannot
// add, remove or hide a mount. Once found, no environment variable can
// disable, redirect or loosen the allocation; the environment only configures
// standalone allocations (no such mount), which serve a single trusted user.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cushare::shim {

struct ManagedMount {
  std::uint64_t mount_id = 0;
  std::uint32_t dev_major = 0, dev_minor = 0;
  std::string alloc_id;  // the folder name the limits file lives in on the node
  std::string limits;    // its mount point in this process's view
  std::string run_dir;   // the folder holding it (the allocation's folder as mounted)
};

// The managed allocation's limits mount in mountinfo text: a read-only mount
// whose mount point ends in "/limits" and whose root (the path in its source
// file system) ends in "/alloc/<id>/limits". Several: the last (topmost).
std::optional<ManagedMount> find_managed_mount(std::string_view mountinfo);

// The process's managed allocation, read once and cached (thread-safe), or
// nullopt when it has none (standalone).
const std::optional<ManagedMount>& managed_allocation();

// Checks that the file open on `fd` is the managed limits mount: on a
// read-only mount, and that very mount (its mount id where the kernel tells,
// else its device). Returns why not.
std::optional<std::string> verify_managed_limits(int fd, const ManagedMount& mount);

}  // namespace cushare::shim
