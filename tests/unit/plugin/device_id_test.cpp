#include "plugin/core/device_id.hpp"

#include <gtest/gtest.h>

namespace cushare::plugin {
namespace {

TEST(DeviceId, FormatsAndParsesRoundTrip) {
  const std::string uuid = "GPU-12345678-1234-1234-1234-123456789abc";
  const auto id = format_device_id(uuid, 42);
  EXPECT_EQ(id, uuid + "::42");
  EXPECT_LE(id.size(), kMaxDeviceIdLength);
  const auto parsed = parse_device_id(id);
  EXPECT_EQ(parsed.gpu_uuid, uuid);
  EXPECT_EQ(parsed.unit, 42u);
}

TEST(DeviceId, RejectsMalformedIdsNamingThem) {
  for (const char* bad : {"", "GPU-x", "::3", "GPU-x::", "GPU-x::-1", "GPU-x::1a", "GPU-x::3::4",
                          "GPU-x:3", "GPU-x:: 3"}) {
    try {
      parse_device_id(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const DeviceIdError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace cushare::plugin
