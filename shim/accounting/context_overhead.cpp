#include "shim/accounting/context_overhead.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <vector>

#include "shim/accounting/graph_accounting.hpp"
#include "shim/accounting/memory_quiescence.hpp"
#include "shim/accounting/pool_accounting.hpp"
#include "shim/devices/device_uuid.hpp"
#include "shim/driver/real_driver.hpp"
#include "shim/process/logging.hpp"
#include "shm/quota_ledger.hpp"

namespace cushare::shim {
namespace {

struct ContextRecord {
  CUcontext ctx;  // nullptr: a primary context
  CUdevice ordinal;
  unsigned gpu;
  std::uint64_t overhead;
};

// Context creation is rare and slow in the driver; a mutex is fine here.
std::mutex& records_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<ContextRecord>& records() {
  static auto* v = new std::vector<ContextRecord>;
  return *v;
}

bool nvml_ready() noexcept {
  static const bool ready = [] {
    const RealNvml& n = real_nvml();
    return n.library_loaded && n.nvmlInit_v2 && n.nvmlDeviceGetHandleByUUID &&
           n.nvmlDeviceGetMemoryInfo && n.nvmlInit_v2() == nvml::kSuccess;
  }();
  return ready;
}

}  // namespace

MemorySample sample_memory(CUdevice ordinal) noexcept {
  MemorySample s;
  if (!nvml_ready()) return s;
  CUuuid uuid{};
  if (real().cuDeviceGetUuid_v2(&uuid, ordinal) != CUDA_SUCCESS) return s;
  const std::string text = format_gpu_uuid(uuid);
  const RealNvml& n = real_nvml();
  nvml::Device dev = nullptr;
  if (n.nvmlDeviceGetHandleByUUID(text.c_str(), &dev) != nvml::kSuccess) return s;
  s.nvml = true;
  nvml::Memory mem{};
  if (n.nvmlDeviceGetMemoryInfo(dev, &mem) == nvml::kSuccess) {
    s.device_known = true;
    s.device_free = mem.free;
  }
  if (n.nvmlDeviceGetComputeRunningProcesses_v3) {
    nvml::ProcessInfo infos[64];
    unsigned int count = 64;
    if (n.nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos) == nvml::kSuccess) {
      const auto self = static_cast<unsigned>(getpid());
      for (unsigned i = 0; i < count && i < 64; ++i) {
        if (infos[i].pid == self) {
          s.process_known = true;
          s.process_used = infos[i].usedGpuMemory;
        }
      }
    }
  }
  return s;
}

namespace {

// The process's memory pools and graph memory pool on one device: the
// quota their charges hold, and what the driver says they reserve now.
struct PoolsNow {
  std::uint64_t charged = 0;
  std::uint64_t pools = 0;
  std::uint64_t graph = 0;
  std::uint64_t reserved() const noexcept { return pools + graph; }
};

bool pools_now(unsigned gpu, CUdevice ordinal, PoolsNow& out) noexcept {
  PoolFigures pools;
  std::uint64_t graph_charged = 0;
  if (!pool_figures(gpu, pools) || !graph_memory_figures(ordinal, graph_charged, out.graph))
    return false;
  out.charged = pools.charged + graph_charged;
  out.pools = pools.reserved;
  return true;
}

// NVML's figures between two readings of the pools, retaken when a pool
// moved in between; `known` false when the pools could not be read alike.
MemorySample bracketed_sample(unsigned gpu, CUdevice ordinal, PoolsNow& at, bool& known) noexcept {
  known = false;
  MemorySample s;
  for (int attempt = 0; attempt < 3; ++attempt) {
    PoolsNow first, second;
    const bool read = pools_now(gpu, ordinal, first);
    s = sample_memory(ordinal);
    if (!read || !pools_now(gpu, ordinal, second)) break;
    if (first.pools == second.pools && first.graph == second.graph) {
      at = first;
      known = true;
      break;
    }
  }
  return s;
}

}  // namespace

MemorySample sample_memory(const AllocationState& st, CUdevice ordinal) noexcept {
  const unsigned gpu = gpu_index_of_device(st, ordinal);
  if (gpu >= shm::kMaxGpus) return sample_memory(ordinal);
  PoolsNow pools;
  bool pools_known = false;
  MemorySample s = bracketed_sample(gpu, ordinal, pools, pools_known);
  s.pools_known = pools_known;
  s.pools = pools.reserved();
  s.tracked_known = true;
  s.tracked = st.slot->bytes[gpu].load(std::memory_order_acquire) +
              st.slot->overhead[gpu].load(std::memory_order_acquire);
  return s;
}

std::uint64_t default_context_overhead(int cc_major) noexcept {
  // Measured context footprints with lazy module loading are ~300-500 MiB
  // on Hopper and ~250-400 MiB on Ampere/Ada; these leave room above them.
  if (cc_major >= 9) return 640ull << 20;
  if (cc_major >= 8) return 512ull << 20;
  return 384ull << 20;
}

std::uint64_t expected_context_overhead(const AllocationState& st, CUdevice ordinal) noexcept {
  const unsigned gpu = gpu_index_of_device(st, ordinal);
  if (gpu < shm::kMaxGpus) {
    const std::uint64_t seen =
        st.usage->gpus[gpu].context_overhead_seen.load(std::memory_order_relaxed);
    if (seen > 0 && seen < (std::uint64_t{1} << 40)) return seen + kLearnedMargin;
  }
  int major = 0;
  const RealDriver& r = real();
  if (!r.cuDeviceGetAttribute ||
      r.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ordinal) !=
          CUDA_SUCCESS)
    major = 0;
  return default_context_overhead(major);
}

namespace {

// Records a context's charge for its destruction, and what it took for the
// next context's reservation.
void record(const AllocationState& st, CUcontext ctx, CUdevice ordinal, unsigned gpu,
            std::uint64_t charged, bool measured) noexcept {
  if (measured && charged > 0)
    st.usage->gpus[gpu].context_overhead_seen.store(charged, std::memory_order_relaxed);
  std::lock_guard lock(records_mutex());
  records().push_back({ctx, ordinal, gpu, charged});
}

bool has_primary_record(CUdevice ordinal) {
  std::lock_guard lock(records_mutex());
  for (const auto& rec : records())
    if (!rec.ctx && rec.ordinal == ordinal) return true;
  return false;
}

constinit std::atomic<bool> g_device_seen[kMaxDevices]{};

}  // namespace

ContextReservation::ContextReservation(const AllocationState& st, CUdevice ordinal) noexcept
    : st_(st), ordinal_(ordinal), gpu_(gpu_index_of_device(st, ordinal)) {
  if (gpu_ >= shm::kMaxGpus) {  // allocations there are refused anyway
    ok_ = true;
    done_ = true;
    return;
  }
  reserved_ = expected_context_overhead(st, ordinal);
  const std::uint64_t limit = memory_limit(st, gpu_);
  shm::QuotaLedger ledger(*st.usage);
  ok_ = ledger.try_charge_overhead(gpu_, *st.slot, reserved_, limit);
  if (!ok_) {
    done_ = true;
    log().error(
        "context creation on device {} refused: allocation '{}' ({}) has {} of {} bytes in use "
        "and a context takes about {} bytes of device memory, which must fit in the quota",
        ordinal, st.limits->header.alloc_id, st.run_dir, ledger.used(gpu_), limit, reserved_);
    auto& usage = st.usage->gpus[gpu_];
    usage.oom_refusals.fetch_add(1, std::memory_order_relaxed);
    usage.last_oom_request_bytes.store(reserved_, std::memory_order_relaxed);
  }
}

ContextReservation::~ContextReservation() {
  if (!done_) shm::QuotaLedger(*st_.usage).release_overhead(gpu_, *st_.slot, reserved_);
}

void ContextReservation::created(CUcontext ctx, const MemorySample& before,
                                 const MemorySample& after, bool quiet) noexcept {
  if (done_) return;
  done_ = true;
  quiet = quiet && before.pools_known && after.pools_known;
  std::uint64_t overhead = 0;
  const bool measured = estimate_overhead(before, after, overhead) && overhead > 0;
  // Not quiet: other memory calls may have moved the figures either way, so
  // only a measurement above the reservation counts (fail closed), and
  // nothing is learnt from it.
  if (!quiet) log_unquiet_measurement();
  if (measured && !quiet) overhead = std::max(overhead, reserved_);
  shm::QuotaLedger ledger(*st_.usage);
  std::uint64_t charged = reserved_;
  if (measured) {
    // What the context took exists whatever the quota says: more than the
    // reservation is charged anyway (later allocations are then refused).
    if (overhead > reserved_) {
      ledger.charge_overhead(gpu_, *st_.slot, overhead - reserved_);
    } else {
      ledger.release_overhead(gpu_, *st_.slot, reserved_ - overhead);
    }
    charged = overhead;
  } else {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log().warn(
          "NVML is not available: each context is charged the {} bytes reserved for it until the "
          "daemon measures it",
          reserved_);
  }
  record(st_, ctx, ordinal_, gpu_, charged, measured && quiet);
  if (!ctx && ordinal_ >= 0 && static_cast<unsigned>(ordinal_) < kMaxDevices)
    g_device_seen[ordinal_].store(true, std::memory_order_relaxed);
  log().debug("context on device {} reserved {} bytes, charged {}", ordinal_, reserved_, charged);
}

void charge_unseen_primary(const AllocationState& st, CUdevice ordinal) noexcept {
  const unsigned gpu = gpu_index_of_device(st, ordinal);
  if (gpu >= shm::kMaxGpus) return;
  unsigned int flags = 0;
  int active = 0;
  const RealDriver& r = real();
  if (!r.cuDevicePrimaryCtxGetState ||
      r.cuDevicePrimaryCtxGetState(ordinal, &flags, &active) != CUDA_SUCCESS || !active)
    return;
  if (has_primary_record(ordinal)) return;
  // It exists already: what it holds is this process's NVML figure minus
  // what the shim tracked, else the reservation a creation would have made
  // (also the least it is charged when other memory calls kept running).
  const QuietWindow window(st);
  PoolsNow pools;
  bool pools_known = false;
  const MemorySample now = bracketed_sample(gpu, ordinal, pools, pools_known);
  // The allocations the shim tracked, with the pools at what they reserve
  // now rather than at what they are charged.
  const std::uint64_t bytes = st.slot->bytes[gpu].load(std::memory_order_acquire);
  const std::uint64_t tracked =
      (bytes > pools.charged ? bytes - pools.charged : 0) + pools.reserved();
  const bool measured = now.process_known && now.process_used > tracked;
  const std::uint64_t expected = expected_context_overhead(st, ordinal);
  std::uint64_t overhead = measured ? now.process_used - tracked : expected;
  if (!window.quiet() || !pools_known) {
    log_unquiet_measurement();
    overhead = std::max(overhead, expected);
  }
  shm::QuotaLedger(*st.usage).charge_overhead(gpu, *st.slot, overhead);
  record(st, nullptr, ordinal, gpu, overhead, measured && window.quiet() && pools_known);
  log().info(
      "device {}: a primary context made without a call the shim sees (the CUDA runtime's own "
      "path) is charged {} bytes",
      ordinal, overhead);
}

void note_device_use(const AllocationState& st, CUdevice ordinal) noexcept {
  if (ordinal < 0 || static_cast<unsigned>(ordinal) >= kMaxDevices) return;
  if (g_device_seen[ordinal].load(std::memory_order_relaxed)) [[likely]]
    return;
  std::lock_guard serial(measurement_mutex());
  charge_unseen_primary(st, ordinal);
  g_device_seen[ordinal].store(true, std::memory_order_relaxed);
}

std::mutex& measurement_mutex() noexcept {
  static auto* m = new std::mutex;
  return *m;
}

void log_unquiet_measurement() noexcept {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    log().warn(
        "a context creation or module load measured its device memory while other memory calls "
        "of the process kept running for {} ms: it keeps the charge reserved for it (this is "
        "logged once)",
        kQuietWaitNs / 1'000'000);
}

bool is_created_context(CUcontext ctx) noexcept {
  if (!ctx) return false;
  std::lock_guard lock(records_mutex());
  for (const auto& rec : records())
    if (rec.ctx == ctx) return true;
  return false;
}

void context_destroyed(const AllocationState& st, CUcontext ctx, CUdevice ordinal) noexcept {
  std::lock_guard lock(records_mutex());
  auto& v = records();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it->ctx != ctx || (!ctx && it->ordinal != ordinal)) continue;
    shm::QuotaLedger(*st.usage).release_overhead(it->gpu, *st.slot, it->overhead);
    v.erase(it);
    return;
  }
}

void context_reset_after_fork() noexcept {
  // The child never holds the parent's lock's owner; start clean.
  new (&records_mutex()) std::mutex;
  new (&measurement_mutex()) std::mutex;
  records().clear();
  for (auto& seen : g_device_seen) seen.store(false, std::memory_order_relaxed);
}

}  // namespace cushare::shim
