// Per-process device memory as NVML reports it (the driver's own figure,
// context and module overhead included). Loaded with dlopen so the daemon
// runs, without overhead reconciliation, on machines without a GPU driver.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace cushare::sched {

class NvmlReader {
 public:
  NvmlReader();  // dlopen("libnvidia-ml.so.1") + nvmlInit_v2; available() says if it worked
  ~NvmlReader();
  NvmlReader(const NvmlReader&) = delete;
  NvmlReader& operator=(const NvmlReader&) = delete;

  bool available() const { return init_ok_; }
  // host PID -> used bytes of every compute process on the GPU with this
  // UUID; nullopt when NVML cannot answer.
  std::optional<std::map<std::uint32_t, std::uint64_t>> process_memory(const std::string& uuid);

 private:
  void* lib_ = nullptr;
  bool init_ok_ = false;
  using Device = struct nvmlDevice_st*;
  int (*get_handle_by_uuid_)(const char*, Device*) = nullptr;
  int (*get_processes_)(Device, unsigned int*, void*) = nullptr;
  int (*shutdown_)() = nullptr;
};

// Context overhead to charge a process: what NVML says it uses minus what
// the shim tracked for it; never negative.
inline std::uint64_t measured_overhead(std::uint64_t nvml_used, std::uint64_t tracked) {
  return nvml_used > tracked ? nvml_used - tracked : 0;
}

}  // namespace cushare::sched
