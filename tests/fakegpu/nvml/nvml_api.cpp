// Simulated libnvidia-ml.so.1: device enumeration, memory and process views
// and utilisation read from the shared fakegpu state (the same truth the
// simulated driver writes), plus XID events injected by fakegpu-stat.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "nvml_subset.h"
#include "tests/fakegpu/core/config.hpp"
#include "tests/fakegpu/core/engine.hpp"
#include "tests/fakegpu/core/pid_view.hpp"
#include "tests/fakegpu/core/state_file.hpp"

#define FAKEGPU_NVML_API extern "C" __attribute__((visibility("default")))

struct nvmlDevice_st {
  uint32_t index;
};

struct nvmlEventSet_st {
  uint32_t magic = 0xE5E70001;
  unsigned long long types[fakegpu::kMaxDevices] = {};
  uint64_t last_seq = 0;
};

using namespace fakegpu;

namespace {

struct Nvml {
  std::mutex mu;
  int refs = 0;
  Config config;
  StateFile* file = nullptr;  // mapped once, kept across shutdown/init cycles
  nvmlDevice_st devices[kMaxDevices];
};

Nvml& nvml() {
  static auto* instance = new Nvml();
  return *instance;
}

nvmlReturn_t ready() {
  Nvml& n = nvml();
  std::lock_guard<std::mutex> guard(n.mu);
  return n.refs > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t device_of(nvmlDevice_t device, uint32_t* index) {
  if (nvmlReturn_t r = ready(); r != NVML_SUCCESS) return r;
  Nvml& n = nvml();
  if (device == nullptr || device < n.devices || device >= n.devices + n.config.devices.size()) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *index = device->index;
  return NVML_SUCCESS;
}

nvmlReturn_t copy_string(const char* text, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, text, std::strlen(text) + 1);
  return NVML_SUCCESS;
}

struct ProcessRow {
  unsigned int pid;
  unsigned long long memory;
};

// Processes holding contexts or memory on a device (host PIDs, context included).
std::vector<ProcessRow> processes_on(uint32_t device) {
  Nvml& n = nvml();
  see_foreign(*n.file);
  StateLock lock(*n.file, true);
  const SharedState& s = lock.state();
  std::vector<ProcessRow> rows;
  for (int32_t p = 0; p < static_cast<int32_t>(kMaxProcs); ++p) {
    const ProcSlot& proc = s.procs[p];
    if (proc.state != SlotState::live) continue;
    bool has_context = false;
    for (const ContextSlot& c : s.contexts)
      has_context |= c.state == SlotState::live && c.proc == p && c.device == device;
    const auto pid = visible_pid(proc);  // PIDs as this process sees them
    if ((has_context || proc.mem[device] > 0) && pid)
      rows.push_back({static_cast<unsigned>(*pid), proc.mem[device]});
  }
  return rows;
}

template <typename Info>
nvmlReturn_t fill_processes(nvmlDevice_t device, unsigned int* infoCount, Info* infos,
                            bool with_instances) {
  uint32_t index = 0;
  if (nvmlReturn_t r = device_of(device, &index); r != NVML_SUCCESS) return r;
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<ProcessRow> rows = processes_on(index);
  if (*infoCount < rows.size()) {
    *infoCount = static_cast<unsigned>(rows.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (infos == nullptr && !rows.empty()) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < rows.size(); ++i) {
    Info info{};
    info.pid = rows[i].pid;
    info.usedGpuMemory = rows[i].memory;
    if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
      (void)with_instances;
      info.gpuInstanceId = 0xFFFFFFFFu;
      info.computeInstanceId = 0xFFFFFFFFu;
    }
    infos[i] = info;
  }
  *infoCount = static_cast<unsigned>(rows.size());
  return NVML_SUCCESS;
}

// NVML timestamps are CPU time in microseconds (wall clock); the engine runs
// on CLOCK_MONOTONIC. The offset between the two is taken once per process,
// so that a sample's stamp is the same at every call (read afresh, two
// clock readings a few ns apart could move a stamp by a microsecond, and a
// sample already seen would come again as newer than lastSeen).
uint64_t wall_minus_monotonic_ns() {
  static const uint64_t offset = realtime_ns() - monotonic_ns();
  return offset;
}

uint64_t wall_us_from_monotonic(uint64_t mono_ns) {
  return (mono_ns + wall_minus_monotonic_ns()) / 1000;
}

}  // namespace

FAKEGPU_NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags;
  Nvml& n = nvml();
  std::lock_guard<std::mutex> guard(n.mu);
  if (n.refs > 0) {
    ++n.refs;
    return NVML_SUCCESS;
  }
  if (n.file == nullptr) {
    ConfigResult loaded = load_config();
    if (!loaded.config) {
      std::fprintf(stderr, "%s\n", loaded.error.c_str());
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    std::string error;
    n.file = StateFile::open(*loaded.config, error);
    if (n.file == nullptr) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    n.config = *loaded.config;
    const uint32_t count = n.file->state().header.device_count;
    n.config.devices.resize(count);  // the state file's devices are the node's devices
    for (uint32_t i = 0; i < count; ++i) n.devices[i].index = i;
  }
  n.refs = 1;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlInit_v2(void) {
  return nvmlInitWithFlags(0);
}
FAKEGPU_NVML_API nvmlReturn_t nvmlInit(void) {
  return nvmlInitWithFlags(0);
}

FAKEGPU_NVML_API nvmlReturn_t nvmlShutdown(void) {
  Nvml& n = nvml();
  std::lock_guard<std::mutex> guard(n.mu);
  if (n.refs == 0) return NVML_ERROR_UNINITIALIZED;
  --n.refs;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED:
      return "Deprecated";
    case NVML_ERROR_NOT_READY:
      return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "GPU not found";
    case NVML_ERROR_INVALID_STATE:
      return "Invalid state";
    default:
      return "Unknown Error";
  }
}

FAKEGPU_NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (nvmlReturn_t r = ready(); r != NVML_SUCCESS) return r;
  return copy_string("580.65.06-fakegpu", version, length);
}

FAKEGPU_NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  if (nvmlReturn_t r = ready(); r != NVML_SUCCESS) return r;
  return copy_string("13.580.65.06", version, length);
}

FAKEGPU_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cudaDriverVersion) {
  if (cudaDriverVersion == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  ConfigResult loaded = load_config();
  *cudaDriverVersion = loaded.config ? loaded.config->driver_version : 13000;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion) {
  return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  if (nvmlReturn_t r = ready(); r != NVML_SUCCESS) return r;
  if (deviceCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *deviceCount = static_cast<unsigned>(nvml().config.devices.size());
  return NVML_SUCCESS;
}
FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount) {
  return nvmlDeviceGetCount_v2(deviceCount);
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                            nvmlDevice_t* device) {
  if (nvmlReturn_t r = ready(); r != NVML_SUCCESS) return r;
  if (device == nullptr || index >= nvml().config.devices.size())
    return NVML_ERROR_INVALID_ARGUMENT;
  *device = &nvml().devices[index];
  return NVML_SUCCESS;
}
FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  if (nvmlReturn_t r = ready(); r != NVML_SUCCESS) return r;
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  Nvml& n = nvml();
  for (uint32_t i = 0; i < n.config.devices.size(); ++i) {
    if (std::strcmp(n.file->state().devices[i].uuid, uuid) == 0) {
      *device = &n.devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

namespace {
void pci_bus_id(uint32_t index, char* out, size_t size) {
  std::snprintf(out, size, "00000000:%02X:00.0", 0x18 + index);  // matches cuDeviceGetPCIBusId
}
}  // namespace

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId,
                                                               nvmlDevice_t* device) {
  if (nvmlReturn_t r = ready(); r != NVML_SUCCESS) return r;
  if (pciBusId == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  Nvml& n = nvml();
  for (uint32_t i = 0; i < n.config.devices.size(); ++i) {
    char id[32];
    pci_bus_id(i, id, sizeof id);
    if (strcasecmp(id, pciBusId) == 0 || strcasecmp(id + 4, pciBusId) == 0) {
      *device = &n.devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *index = i;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                unsigned int length) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  return copy_string(nvml().file->state().devices[i].name, name, length);
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                unsigned int length) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  return copy_string(nvml().file->state().devices[i].uuid, uuid, length);
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
                                                       unsigned int* minorNumber) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (minorNumber == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *minorNumber = i;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *pci = nvmlPciInfo_t{};
  pci_bus_id(i, pci->busId, sizeof pci->busId);
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", 0x18 + i);
  pci->domain = 0;
  pci->bus = 0x18 + i;
  pci->device = 0;
  pci->pciDeviceId = 0x233010DE;  // H100 SXM device id | NVIDIA vendor id
  pci->pciSubSystemId = 0x16C110DE;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                                 int* minor) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *major = nvml().file->state().devices[i].cc_major;
  *minor = nvml().file->state().devices[i].cc_minor;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  StateLock lock(*nvml().file, true);
  const DeviceSlot& d = lock.state().devices[i];
  memory->total = d.total_mem;
  memory->used = std::min(d.used_mem, d.total_mem);
  memory->free = d.total_mem - memory->used;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                         nvmlMemory_v2_t* memory) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  StateLock lock(*nvml().file, true);
  const DeviceSlot& d = lock.state().devices[i];
  memory->total = d.total_mem;
  memory->reserved = 0;  // no driver-reserved memory is modelled
  memory->used = std::min(d.used_mem, d.total_mem);
  memory->free = d.total_mem - memory->used;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                      unsigned int* infoCount,
                                                                      nvmlProcessInfo_t* infos) {
  return fill_processes(device, infoCount, infos, true);
}
FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                      unsigned int* infoCount,
                                                                      nvmlProcessInfo_v2_t* infos) {
  return fill_processes(device, infoCount, infos, true);
}
FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                   unsigned int* infoCount,
                                                                   nvmlProcessInfo_v1_t* infos) {
  return fill_processes(device, infoCount, infos, false);
}

namespace {
nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int* infoCount) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *infoCount = 0;
  return NVML_SUCCESS;
}
}  // namespace

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                                       unsigned int* infoCount,
                                                                       nvmlProcessInfo_t* infos) {
  (void)infos;
  return no_processes(device, infoCount);  // no graphics contexts exist on fakegpu
}
FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                         unsigned int* infoCount,
                                                                         nvmlProcessInfo_t* infos) {
  (void)infos;
  return no_processes(device, infoCount);  // MPS is not modelled
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                            nvmlUtilization_t* utilization) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  StateLock lock(*nvml().file);
  // Sample period: the last second (real drivers use 1/6 s to 1 s).
  uint64_t busy = 0, span = 0;
  device_busy_since(lock.state(), i, lock.now() - std::min<uint64_t>(lock.now(), 1'000'000'000),
                    lock.now(), &busy, &span);
  utilization->gpu =
      span ? static_cast<unsigned>(std::min<uint64_t>(100, (busy * 100 + span / 2) / span)) : 0;
  utilization->memory = 0;  // memory-controller activity is not modelled
  return NVML_SUCCESS;
}

// The device's own utilisation samples (GPU_UTILIZATION_SAMPLES only): one
// per 100 ms sampling period, idle ones included, stamped at the period's
// end, for the periods that ended after lastSeen and that the checkpoint
// ring still holds. Without a buffer, the count there is; with one, as many
// as fit, oldest first.
FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                                   unsigned long long lastSeenTimeStamp,
                                                   nvmlValueType_t* sampleValType,
                                                   unsigned int* sampleCount,
                                                   nvmlSample_t* samples) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (sampleValType == nullptr || sampleCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (type < NVML_TOTAL_POWER_SAMPLES || type >= NVML_SAMPLINGTYPE_COUNT)
    return NVML_ERROR_INVALID_ARGUMENT;
  if (type != NVML_GPU_UTILIZATION_SAMPLES) return NVML_ERROR_NOT_SUPPORTED;
  std::vector<nvmlSample_t> found;
  see_foreign(*nvml().file);
  {
    StateLock lock(*nvml().file);
    const SharedState& s = lock.state();
    const DeviceSlot& d = s.devices[i];
    const uint64_t created = s.header.created_ns;
    for (uint64_t k = d.ck_index >= kUtilRing - 1 ? d.ck_index - (kUtilRing - 2) : 1;
         k <= d.ck_index; ++k) {
      const uint64_t stamp = wall_us_from_monotonic(created + k * kUtilPeriodNs);
      uint64_t busy = 0;
      if (stamp <= lastSeenTimeStamp || !device_period_busy(s, i, k, &busy)) continue;
      nvmlSample_t sample{};
      sample.timeStamp = stamp;
      sample.sampleValue.uiVal = static_cast<unsigned>(
          std::min<uint64_t>(100, (busy * 100 + kUtilPeriodNs / 2) / kUtilPeriodNs));
      found.push_back(sample);
    }
  }
  *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
  if (found.empty()) return NVML_ERROR_NOT_FOUND;
  if (samples == nullptr) {
    *sampleCount = static_cast<unsigned>(found.size());
    return NVML_SUCCESS;
  }
  const auto n = std::min<std::size_t>(*sampleCount, found.size());
  std::copy_n(found.begin(), n, samples);
  *sampleCount = static_cast<unsigned>(n);
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
    unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (processSamplesCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<nvmlProcessUtilizationSample_t> samples;
  see_foreign(*nvml().file);
  {
    StateLock lock(*nvml().file);
    const SharedState& s = lock.state();
    const DeviceSlot& d = s.devices[i];
    // As a driver's (seen on an H100, driver 580): only each process's
    // sample of the sampling period (here the checkpoint period) that ended
    // last, stamped at its end, if the process was busy in it and the period
    // ended after lastSeen. A reader that asks less often than once a period
    // misses the periods in between (asked every 500 ms, the H100's 200 ms
    // periods showed 40 % of the GPU time that ran).
    const uint64_t k = d.ck_index;
    const uint64_t stamp = wall_us_from_monotonic(s.header.created_ns + k * kUtilPeriodNs);
    for (int32_t p = 0; k >= 1 && stamp > lastSeenTimeStamp && p < static_cast<int32_t>(kMaxProcs);
         ++p) {
      const ProcSlot& proc = s.procs[p];
      if (proc.state != SlotState::live) continue;
      uint64_t busy = 0;
      const auto pid = visible_pid(proc);
      if (!pid || !process_period_busy(s, p, i, k, &busy) || busy == 0) continue;
      nvmlProcessUtilizationSample_t sample{};
      sample.pid = static_cast<unsigned>(*pid);
      sample.timeStamp = stamp;
      sample.smUtil = static_cast<unsigned>(
          std::min<uint64_t>(100, (busy * 100 + kUtilPeriodNs / 2) / kUtilPeriodNs));
      samples.push_back(sample);
    }
  }
  if (samples.empty()) return NVML_ERROR_NOT_FOUND;
  if (utilization == nullptr || *processSamplesCount < samples.size()) {
    *processSamplesCount = static_cast<unsigned>(samples.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(samples.begin(), samples.end(), utilization);
  *processSamplesCount = static_cast<unsigned>(samples.size());
  return NVML_SUCCESS;
}

// ---- events: XIDs injected with `fakegpu-stat --inject-xid <device> <code>` ----

FAKEGPU_NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (nvmlReturn_t r = ready(); r != NVML_SUCCESS) return r;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto* s = new nvmlEventSet_st();
  StateLock lock(*nvml().file);
  s->last_seq = lock.state().header.xid_seq;  // only events after creation are delivered
  *set = s;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                               unsigned long long* eventTypes) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (eventTypes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *eventTypes = nvmlEventTypeXidCriticalError;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                       unsigned long long eventTypes,
                                                       nvmlEventSet_t set) {
  uint32_t i = 0;
  if (nvmlReturn_t r = device_of(device, &i); r != NVML_SUCCESS) return r;
  if (set == nullptr || set->magic != 0xE5E70001) return NVML_ERROR_INVALID_ARGUMENT;
  if (eventTypes & ~static_cast<unsigned long long>(nvmlEventTypeXidCriticalError))
    return NVML_ERROR_NOT_SUPPORTED;
  set->types[i] |= eventTypes;
  return NVML_SUCCESS;
}

FAKEGPU_NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                  unsigned int timeoutms) {
  if (nvmlReturn_t r = ready(); r != NVML_SUCCESS) return r;
  if (set == nullptr || set->magic != 0xE5E70001 || data == nullptr)
    return NVML_ERROR_INVALID_ARGUMENT;
  const uint64_t deadline = monotonic_ns() + uint64_t{timeoutms} * 1'000'000;
  for (;;) {
    {
      StateLock lock(*nvml().file);
      const StateHeader& h = lock.state().header;
      // Events older than the ring are lost, as a real event queue overflows.
      uint64_t seq = std::max(set->last_seq, h.xid_seq > kXidRing ? h.xid_seq - kXidRing : 0);
      while (seq < h.xid_seq) {
        ++seq;
        const XidRecord& r = h.xids[seq % kXidRing];
        set->last_seq = seq;
        if (r.seq == seq && r.device < kMaxDevices &&
            (set->types[r.device] & nvmlEventTypeXidCriticalError)) {
          *data = nvmlEventData_t{};
          data->device = &nvml().devices[r.device];
          data->eventType = nvmlEventTypeXidCriticalError;
          data->eventData = r.code;
          data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
          return NVML_SUCCESS;
        }
      }
    }
    const uint64_t now = monotonic_ns();
    if (now >= deadline) return NVML_ERROR_TIMEOUT;
    sleep_until_ns(std::min(deadline, now + 5'000'000));
  }
}

FAKEGPU_NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  if (set == nullptr || set->magic != 0xE5E70001) return NVML_ERROR_INVALID_ARGUMENT;
  set->magic = 0;
  delete set;
  return NVML_SUCCESS;
}
