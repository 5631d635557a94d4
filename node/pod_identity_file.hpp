// The pod an allocation belongs to, from RUN/identity/<alloc-id> (written by
// the device plugin, shm/pod_identity.hpp). Only a file the node wrote is
// believed: a regular file, not a link, owned by the owner of the run dir (or
// root), writable by nobody else, in a folder likewise; anything else reads
// as "no identity", since the allocation's own folder is the tenant's to write.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "shm/pod_identity.hpp"

namespace cushare::tools {

std::optional<shm::PodIdentity> read_pod_identity(const std::filesystem::path& run_dir,
                                                  const std::string& alloc_id);

}  // namespace cushare::tools
