// The daemon's side of the control protocol: answers status / inspect / set /
// ping for a node run dir. It reads and writes the regions itself (through
// cushare_status, the same code cusharectl uses without a daemon), so the
// daemon only has to construct it and a ControlServer:
//
//   RunDirControlHandler handler({.run_dir = run_dir, .quantum_ns = q});
//   ControlServer server(run_dir / "cushared.sock", handler);
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

#include "node/status_model.hpp"
#include "scheduler/control_server.hpp"

namespace cushare::sched {

struct ControlHandlerConfig {
  std::filesystem::path run_dir;
  std::uint64_t quantum_ns = 0;  // reported in status
  // The node's GPUs; default: NVML via dlopen, queried once and cached.
  std::function<std::vector<tools::GpuInfo>()> gpus;
  // Clocks; default: the real ones (tests inject fixed values).
  std::function<tools::Now()> now;
  // Who may `set`: root and the daemon's own uid always; add more here.
  std::vector<uid_t> set_allowed_uids;
};

class RunDirControlHandler : public ControlHandler {
 public:
  explicit RunDirControlHandler(ControlHandlerConfig config);
  nlohmann::json handle(const nlohmann::json& request, const PeerCredentials& peer) override;

 private:
  nlohmann::json status();
  nlohmann::json inspect(const nlohmann::json& request);
  nlohmann::json set(const nlohmann::json& request, const PeerCredentials& peer);
  const std::vector<tools::GpuInfo>& gpus();

  ControlHandlerConfig config_;
  std::vector<tools::GpuInfo> gpus_;
  bool gpus_loaded_ = false;
};

}  // namespace cushare::sched
