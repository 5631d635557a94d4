#include "shim/accounting/memory_accounting.hpp"
#include "shim/accounting/memory_quiescence.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>

#include "shim/accounting/context_overhead.hpp"
#include "shim/accounting/graph_accounting.hpp"
#include "shim/accounting/module_accounting.hpp"
#include "shim/accounting/pool_accounting.hpp"
#include "shim/accounting/vmm_accounting.hpp"
#include "shim/driver/real_driver.hpp"
#include "shim/process/call_site.hpp"
#include "shim/process/logging.hpp"
#include "shm/proc_identity.hpp"
#include "shm/process_slots.hpp"

namespace cushare::shim {
namespace {

constinit PointerTable g_device_pointers;
constinit PointerTable g_array_handles;

std::uint64_t unix_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

PointerTable& device_pointers() noexcept {
  return g_device_pointers;
}
PointerTable& array_handles() noexcept {
  return g_array_handles;
}

void reset_accounting_after_fork() noexcept {
  g_device_pointers.reset_after_fork();
  g_array_handles.reset_after_fork();
  pool_reset_after_fork();
  vmm_reset_after_fork();
  context_reset_after_fork();
  module_reset_after_fork();
  graph_reset_after_fork();
  quiescence_reset_after_fork();
}

void release_destroyed_allocations(const AllocationState& st) noexcept {
  const RealDriver& r = real();
  if (!r.cuPointerGetAttribute) return;  // kept charged: over-counts, never under
  device_pointers().sweep(
      [&](std::uint64_t ptr, const Charge& c) {
        if (c.kind != ChargeKind::kDevice && c.kind != ChargeKind::kManaged) return false;
        CUdeviceptr same = 0;  // any attribute: an unknown pointer is CUDA_ERROR_INVALID_VALUE
        return r.cuPointerGetAttribute(&same, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, ptr) ==
               CUDA_ERROR_INVALID_VALUE;
      },
      [&](const Charge& c) { release(st, c.gpu, c.bytes); });
}

void relieve_quota_pressure(const AllocationState& st, unsigned gpu) noexcept {
  trim_pools(st, gpu);
  trim_graph_memory(st, gpu);
}

void reclaim_dead_slots_now_and_then(const AllocationState& st) noexcept {
  static std::atomic<std::int64_t> last{0};
  const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t prev = last.load(std::memory_order_relaxed);
  if (now - prev < 1000 || !last.compare_exchange_strong(prev, now)) return;
  try {
    if (auto pidns = shm::read_pidns_inode(getpid()))
      shm::reclaim_dead_slots(*st.usage, shm::LivenessChecker::same_namespace(*pidns));
  } catch (...) {
  }
}

namespace detail {

bool reserve_slow(const AllocationState& st, unsigned gpu, std::uint64_t bytes,
                  const char* api) noexcept {
  if (gpu >= shm::kMaxGpus) {
    log().error("{}: {} bytes refused: the current device is not part of this allocation ({})", api,
                bytes, st.run_dir);
    return false;
  }
  shm::QuotaLedger ledger(*st.usage);
  const std::uint64_t limit = memory_limit(st, gpu);
  // Memory of processes that died without releasing comes back first.
  if (auto pidns = shm::read_pidns_inode(getpid())) {
    shm::reclaim_dead_slots(*st.usage, shm::LivenessChecker::same_namespace(*pidns));
    if (ledger.try_reserve(gpu, *st.slot, bytes, limit)) return true;
  }
  relieve_quota_pressure(st, gpu);
  if (ledger.try_reserve(gpu, *st.slot, bytes, limit)) return true;

  auto& usage = st.usage->gpus[gpu];
  usage.oom_refusals.fetch_add(1, std::memory_order_relaxed);
  usage.last_oom_request_bytes.store(bytes, std::memory_order_relaxed);
  usage.last_oom_unix_ns.store(unix_ns(), std::memory_order_relaxed);
  try {
    const char* alloc_id = st.limits->header.alloc_id;
    const char* uuid = st.limits->gpus[gpu].uuid;
    if (st.oom_backtrace) {
      log().error(
          "out of memory quota: allocation '{}' ({}) GPU {}: quota {} bytes, used {} "
          "bytes, requested {} bytes by {}; call site: {}",
          alloc_id, st.run_dir, uuid, limit, ledger.used(gpu), bytes, api, call_site());
    } else {
      log().error(
          "out of memory quota: allocation '{}' ({}) GPU {}: quota {} bytes, used {} "
          "bytes, requested {} bytes by {}",
          alloc_id, st.run_dir, uuid, limit, ledger.used(gpu), bytes, api);
    }
  } catch (...) {
  }
  return false;
}

}  // namespace detail

}  // namespace cushare::shim
