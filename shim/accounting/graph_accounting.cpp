#include "shim/accounting/graph_accounting.hpp"

#include <atomic>
#include <mutex>
#include <new>
#include <unordered_map>

#include "shim/accounting/memory_accounting.hpp"
#include "shim/driver/real_driver.hpp"
#include "shim/process/logging.hpp"
#include "shm/quota_ledger.hpp"

namespace cushare::shim {
namespace {

constinit std::atomic<bool> g_expected{false};

std::mutex& needs_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<CUgraph, std::uint64_t>& graph_needs() {
  static auto* m = new std::unordered_map<CUgraph, std::uint64_t>;
  return *m;
}
std::unordered_map<CUgraphExec, std::uint64_t>& exec_needs() {
  static auto* m = new std::unordered_map<CUgraphExec, std::uint64_t>;
  return *m;
}
constinit std::atomic<bool> g_lock{false};
constinit std::uint64_t g_charged[kMaxDevices] = {};      // per CUDA ordinal, reserved as bytes
constinit std::uint64_t g_overcharged[kMaxDevices] = {};  // per ordinal, charged as overhead

struct Guard {
  Guard() {
    while (g_lock.exchange(true, std::memory_order_acquire)) {
    }
  }
  ~Guard() { g_lock.store(false, std::memory_order_release); }
};

bool graph_reserved(CUdevice dev, std::uint64_t& out) {
  const RealDriver& r = real();
  cuuint64_t v = 0;
  if (!r.cuDeviceGetGraphMemAttribute ||
      r.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) !=
          CUDA_SUCCESS)
    return false;
  out = v;
  return true;
}

void settle_device(const AllocationState& st, CUdevice dev, bool may_trim) {
  const unsigned gpu = gpu_index_of_device(st, dev);
  if (gpu >= shm::kMaxGpus || dev < 0 || static_cast<unsigned>(dev) >= kMaxDevices) return;
  const auto d = static_cast<unsigned>(dev);
  std::uint64_t now = 0;
  if (!graph_reserved(dev, now)) return;
  shm::QuotaLedger ledger(*st.usage);
  Guard guard;
  const std::uint64_t have = g_charged[d] + g_overcharged[d];
  if (now < have) {  // shrank: return overhead first, then bytes
    std::uint64_t give = have - now;
    const std::uint64_t from_over = give < g_overcharged[d] ? give : g_overcharged[d];
    if (from_over) {
      const auto cur = st.slot->overhead[gpu].load(std::memory_order_acquire);
      ledger.set_overhead(gpu, *st.slot, cur > from_over ? cur - from_over : 0);
      g_overcharged[d] -= from_over;
      give -= from_over;
    }
    release(st, gpu, give);
    g_charged[d] -= give;
    return;
  }
  const std::uint64_t growth = now - have;
  if (!growth) return;
  if (ledger.try_reserve(gpu, *st.slot, growth, memory_limit(st, gpu))) {
    g_charged[d] += growth;
    return;
  }
  if (may_trim && real().cuDeviceGraphMemTrim && real().cuDeviceGraphMemTrim(dev) == CUDA_SUCCESS &&
      graph_reserved(dev, now) && now <= have) {
    return;  // the trim gave it back; the next settle sees the shrink
  }
  ledger.charge_overhead(gpu, *st.slot, growth);
  g_overcharged[d] += growth;
  log().error(
      "graph memory of device {} grew by {} bytes beyond the memory quota of {} bytes; "
      "charged anyway (it is allocated), later allocations are refused until it is "
      "freed and trimmed",
      dev, growth, memory_limit(st, gpu));
}

}  // namespace

void graph_memory_expected() noexcept {
  g_expected.store(true, std::memory_order_release);
}

bool graph_memory_in_use() noexcept {
  return g_expected.load(std::memory_order_acquire);
}

bool graph_memory_figures(CUdevice dev, std::uint64_t& charged, std::uint64_t& reserved) noexcept {
  charged = reserved = 0;
  if (!g_expected.load(std::memory_order_acquire)) return true;
  if (dev < 0 || static_cast<unsigned>(dev) >= kMaxDevices) return false;
  {
    Guard guard;
    charged = g_charged[static_cast<unsigned>(dev)];
  }
  return graph_reserved(dev, reserved);
}

void graph_add_alloc(CUgraph graph, std::uint64_t bytes) noexcept {
  graph_memory_expected();
  try {
    std::lock_guard lock(needs_mutex());
    graph_needs()[graph] += bytes;
  } catch (...) {
  }
}

void graph_instantiated(CUgraphExec exec, CUgraph graph) noexcept {
  try {
    std::lock_guard lock(needs_mutex());
    auto it = graph_needs().find(graph);
    if (it != graph_needs().end()) {
      exec_needs()[exec] = it->second;
    } else {
      exec_needs().erase(exec);  // a destroyed executable's handle, reused
    }
  } catch (...) {
  }
}

bool graph_launch_reserve(const AllocationState& st, CUgraphExec exec,
                          std::uint64_t& reserved) noexcept {
  reserved = 0;
  if (!g_expected.load(std::memory_order_acquire)) return true;
  std::uint64_t need = 0;
  {
    std::lock_guard lock(needs_mutex());
    auto it = exec_needs().find(exec);
    if (it == exec_needs().end()) return true;
    need = it->second;
  }
  CUdevice dev = -1;
  const unsigned gpu = allocation_gpu_index(st, dev);
  if (dev < 0 || gpu >= shm::kMaxGpus || static_cast<unsigned>(dev) >= kMaxDevices) return true;
  std::uint64_t have = 0;
  {
    Guard guard;
    have = g_charged[static_cast<unsigned>(dev)] + g_overcharged[static_cast<unsigned>(dev)];
  }
  if (need <= have) return true;  // the graph pool already holds enough (charged)
  if (!reserve(st, gpu, need - have, "cuGraphLaunch (graph memory)")) return false;
  reserved = need - have;
  return true;
}

void graph_memory_settle(const AllocationState& st, std::uint64_t reserved) noexcept {
  CUdevice dev = -1;
  const unsigned gpu = allocation_gpu_index(st, dev);
  if (reserved) release(st, gpu, reserved);
  if (!g_expected.load(std::memory_order_acquire) || dev < 0) return;
  settle_device(st, dev, /*may_trim=*/true);
}

void trim_graph_memory(const AllocationState& st, unsigned gpu) noexcept {
  if (!g_expected.load(std::memory_order_acquire)) return;
  const RealDriver& r = real();
  for (int d = 0; d < st.device_count; ++d) {
    if (st.gpu_of_device[static_cast<unsigned>(d)] != gpu) continue;
    if (r.cuDeviceGraphMemTrim) r.cuDeviceGraphMemTrim(d);
    settle_device(st, d, /*may_trim=*/false);
  }
}

void graph_reset_after_fork() noexcept {
  new (&needs_mutex()) std::mutex;
  graph_needs().clear();
  exec_needs().clear();
  g_lock.store(false, std::memory_order_relaxed);
  g_expected.store(false, std::memory_order_relaxed);
  for (unsigned i = 0; i < kMaxDevices; ++i) g_charged[i] = g_overcharged[i] = 0;
}

}  // namespace cushare::shim
