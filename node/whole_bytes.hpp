// Whether a memory quantity names a whole number of bytes. shm's parser
// rounds fractions up, as Kubernetes does ("1.5" -> 2 bytes), which is right
// for a container's environment but hides a typo on the command line, where
// "1.5" almost always meant 1.5Gi.
#pragma once

#include <string_view>

namespace cushare::tools {

// `quantity` must be one shm::parse_k8s_quantity accepted. True for "8Gi",
// "1.5Gi", "0.5Ki", "1e3", "2.5k"; false for "1.5", "1.3Ki", "1e-1".
bool is_whole_byte_count(std::string_view quantity);

}  // namespace cushare::tools
