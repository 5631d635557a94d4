// The few NVML declarations the shim needs. The CUDA toolkit on the build
// machines ships no nvml.h, so these follow nvml.h (NVML_API_VERSION 13)
// as published in NVIDIA/go-nvml; the layouts are part of NVML's stable ABI.
#pragma once

namespace cushare::shim::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorUnknown = 999;

using Device = struct nvmlDevice_st*;  // nvmlDevice_t

struct Memory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct MemoryV2 {  // nvmlMemory_v2_t
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
inline constexpr unsigned int kMemoryV2Version = sizeof(MemoryV2) | (2u << 24);

struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
};

struct ProcessInfo {  // nvmlProcessInfo_v2_t == nvmlProcessInfo_t (v3)
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

inline constexpr unsigned int kDeviceUuidBufferSize = 96;

}  // namespace cushare::shim::nvml
