// Device IDs advertised to the kubelet: "<GPU-UUID>::<n>", n in [0, units).
// They are self-describing, so Allocate can tell the GPU and the share from
// the IDs alone, without knowing the pod.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace cushare::plugin {

inline constexpr std::string_view kIdSeparator = "::";
inline constexpr std::size_t kMaxDeviceIdLength = 63;  // kubelet limit

struct DeviceId {
  std::string gpu_uuid;
  unsigned unit = 0;
};

// A device ID that is malformed or names no known GPU/unit. The message names
// the offending ID so the kubelet event tells the operator what was wrong.
class DeviceIdError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string format_device_id(std::string_view gpu_uuid, unsigned unit);

// Syntax only: "<non-empty uuid>::<decimal unit>"; throws DeviceIdError.
DeviceId parse_device_id(std::string_view id);

}  // namespace cushare::plugin
