#include "tools/gpu_selector.hpp"

#include <algorithm>
#include <stdexcept>

#include "shm/layout.hpp"

namespace cushare::tools {

bool is_gpu_index(const std::string& arg) {
  return !arg.empty() && arg.size() <= 4 &&
         std::all_of(arg.begin(), arg.end(), [](char c) { return c >= '0' && c <= '9'; });
}

namespace {

bool looks_like_uuid(const std::string& arg) {
  return (arg.rfind("GPU-", 0) == 0 || arg.rfind("MIG-", 0) == 0) && arg.size() > 4 &&
         arg.size() < shm::kUuidBytes;
}

std::string resolve_index(const std::string& arg, const std::vector<GpuInfo>& gpus) {
  if (gpus.empty())
    throw std::invalid_argument("--gpu " + arg +
                                " is a GPU index, and turning it into the GPU's UUID needs NVML "
                                "(libnvidia-ml.so.1), which is not available here: pass the "
                                "UUID (nvidia-smi -L lists them)");
  const int index = std::stoi(arg);
  for (const auto& g : gpus)
    if (g.index == index && !g.uuid.empty()) return g.uuid;
  throw std::invalid_argument("--gpu " + arg + ": NVML sees no GPU " + arg + " (it sees " +
                              std::to_string(gpus.size()) + ": indexes 0-" +
                              std::to_string(gpus.size() - 1) + ")");
}

}  // namespace

std::vector<std::string> resolve_gpu_args(const std::vector<std::string>& args,
                                          const std::vector<GpuInfo>& nvml_gpus) {
  std::vector<std::string> uuids;
  for (const auto& arg : args) {
    std::string uuid;
    if (is_gpu_index(arg)) {
      uuid = resolve_index(arg, nvml_gpus);
    } else if (looks_like_uuid(arg)) {
      uuid = arg;
    } else {
      throw std::invalid_argument("--gpu '" + arg +
                                  "' is neither a GPU UUID (GPU-... or MIG-..., as nvidia-smi -L "
                                  "shows) nor a GPU index");
    }
    if (std::find(uuids.begin(), uuids.end(), uuid) != uuids.end()) {
      std::string message = "--gpu " + arg + " names GPU ";
      throw std::invalid_argument(message.append(uuid).append(" a second time"));
    }
    uuids.push_back(uuid);
  }
  return uuids;
}

}  // namespace cushare::tools
