// The NVML the node's components use (the shim's interposed functions, the
// daemon's ground truth, cusharectl's GPU list, the device plugin's discovery
// and health events): one set of types and signatures for all of them. Build
// machines have no nvml.h, so these follow nvml.h (NVML_API_VERSION 13) as
// published in NVIDIA/go-nvml; layouts and signatures are NVML's stable ABI.
// Everyone loads the library at run time (dlopen, or the shim's table of the
// real functions): nothing here links against it.
#pragma once

#include <dlfcn.h>

// NVML's own tags, declared where nvml.h declares them, so that the handle
// types are nvml.h's wherever both are seen.
struct nvmlDevice_st;
struct nvmlEventSet_st;

namespace cushare::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorUnknown = 999;

using Device = struct nvmlDevice_st*;      // nvmlDevice_t
using EventSet = struct nvmlEventSet_st*;  // nvmlEventSet_t

inline constexpr unsigned int kDeviceUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned int kDeviceNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

struct Memory {  // nvmlMemory_t (v1)
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

inline constexpr unsigned int kPciBusIdLegacySize = 16;  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
inline constexpr unsigned int kPciBusIdSize = 32;        // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
struct PciInfo {                                         // nvmlPciInfo_t (v3)
  char busIdLegacy[kPciBusIdLegacySize];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[kPciBusIdSize];
};

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

struct ProcessUtilizationSample {  // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long timeStamp;  // CPU time, microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

inline constexpr int kGpuUtilizationSamples = 1;  // nvmlSamplingType_t

struct Sample {                    // nvmlSample_t
  unsigned long long timeStamp;    // CPU time, microseconds
  unsigned long long sampleValue;  // nvmlValue_t: 8 bytes, of the type the call names
};

struct EventData {  // nvmlEventData_t
  Device device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x0000000000000008ULL;

// The functions, each under the NVML name(s) it is loaded by.
// nvmlInit_v2
using InitFn = Return (*)();
// nvmlShutdown
using ShutdownFn = Return (*)();
// nvmlErrorString
using ErrorStringFn = const char* (*)(Return);
// nvmlDeviceGetCount_v2
using DeviceGetCountFn = Return (*)(unsigned int*);
// nvmlDeviceGetHandleByIndex_v2
using DeviceGetHandleByIndexFn = Return (*)(unsigned int, Device*);
// nvmlDeviceGetHandleByUUID
using DeviceGetHandleByUuidFn = Return (*)(const char*, Device*);
// nvmlDeviceGetUUID, nvmlDeviceGetName
using DeviceGetStringFn = Return (*)(Device, char*, unsigned int);
// nvmlDeviceGetMemoryInfo
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);
// nvmlDeviceGetMemoryInfo_v2
using DeviceGetMemoryInfoV2Fn = Return (*)(Device, MemoryV2*);
// nvmlDeviceGetPciInfo_v3
using DeviceGetPciInfoFn = Return (*)(Device, PciInfo*);
// nvmlDeviceGetMinorNumber
using DeviceGetMinorNumberFn = Return (*)(Device, unsigned int*);
// nvmlDeviceGetComputeRunningProcesses
using DeviceGetProcessesV1Fn = Return (*)(Device, unsigned int*, ProcessInfoV1*);
// nvmlDeviceGetComputeRunningProcesses_v2, _v3
using DeviceGetProcessesFn = Return (*)(Device, unsigned int*, ProcessInfo*);
// nvmlDeviceGetProcessUtilization
using DeviceGetProcessUtilizationFn = Return (*)(Device, ProcessUtilizationSample*, unsigned int*,
                                                 unsigned long long);
// nvmlDeviceGetSamples (the enums as int)
using DeviceGetSamplesFn = Return (*)(Device, int, unsigned long long, int*, unsigned int*,
                                      Sample*);
// nvmlEventSetCreate
using EventSetCreateFn = Return (*)(EventSet*);
// nvmlDeviceRegisterEvents
using DeviceRegisterEventsFn = Return (*)(Device, unsigned long long, EventSet);
// nvmlEventSetWait_v2
using EventSetWaitFn = Return (*)(EventSet, EventData*, unsigned int);
// nvmlEventSetFree
using EventSetFreeFn = Return (*)(EventSet);

// `name` from a dlopen'ed NVML as its function type (null when missing).
template <typename Fn>
Fn symbol(void* lib, const char* name) noexcept {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace cushare::nvml
