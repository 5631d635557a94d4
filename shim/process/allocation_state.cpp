#include "shim/process/allocation_state.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <vector>

#include "shim/accounting/context_overhead.hpp"
#include "shim/accounting/managed_allocation.hpp"
#include "shim/accounting/memory_accounting.hpp"
#include "shim/devices/device_uuid.hpp"
#include "shim/devices/visible_devices.hpp"
#include "shim/driver/real_driver.hpp"
#include "shim/gate/clock.hpp"
#include "shim/process/fork_reset.hpp"
#include "shim/process/logging.hpp"
#include "shim/process/shim_env.hpp"
#include "shm/clock.hpp"
#include "shm/limits_seqlock.hpp"
#include "shm/process_slots.hpp"
#include "shm/quota_spec.hpp"
#include "shm/region_file.hpp"
#include "shm/run_dir_layout.hpp"

namespace cushare::shim {
namespace detail {
std::atomic<const AllocationState*> g_state{nullptr};
std::atomic<ShimMode> g_mode{ShimMode::kUninitialized};
}  // namespace detail

namespace {

namespace fs = std::filesystem;

// Everything here is created once and deliberately never destroyed: atexit
// handlers and other libraries' destructors may still call CUDA after ours.
struct Holder {
  std::optional<shm::LimitsMapping> limits;
  std::optional<shm::UsageMapping> usage;
  AllocationState state;
  bool needs_new_slot = false;  // fork child: the slot in `state` is the parent's
};

Holder& holder() {
  static auto* h = new Holder;
  return *h;
}

std::mutex& init_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

CUresult fail_closed(const std::string& why) {
  log().error(
      "{}; refusing to run without a quota (cuInit fails with CUDA_ERROR_INVALID_VALUE; in a "
      "standalone allocation CUSHARE_DISABLE=1 passes every call through, for debugging)",
      why);
  detail::g_mode.store(ShimMode::kFailed, std::memory_order_release);
  return CUDA_ERROR_INVALID_VALUE;
}

void warn_on_disagreement(const shm::LimitsRegion& limits,
                          const std::vector<shm::GpuQuotaSpec>& spec, const fs::path& path) {
  for (const auto& s : spec) {
    if (s.memory_source.empty()) continue;  // the environment says nothing
    auto idx = shm::find_gpu_entry(limits, s.uuid);
    if (!idx) continue;
    const auto have = shm::read_gpu_limits(limits, *idx).memory_limit_bytes;
    if (have != s.memory_limit_bytes) {
      log().warn(
          "{}={} asks for a memory quota of {} bytes on {}, but {} says {} bytes; the "
          "region wins (delete it, with no process running, to change a standalone "
          "quota)",
          s.memory_source, s.memory_limit_bytes, s.memory_limit_bytes, s.uuid, path.string(), have);
    }
  }
}

// Exit withdraws the process's scheduling marks and nothing else. Its memory
// is the device's until the process is gone (the driver frees it at teardown,
// after every exit handler), so its charges stay until a reclaim finds it
// dead; and the shim keeps enforcing, because threads and later exit handlers
// may still allocate and launch.
void withdraw_at_exit() {
  if (detail::g_mode.load(std::memory_order_acquire) != ShimMode::kActive) return;
  if (const AllocationState* st = detail::g_state.load(std::memory_order_acquire))
    shm::withdraw_marks(*st->usage, st->slot_index);
}

// Initialisation is never half-done in a fork child: the fork waits for it.
void atfork_prepare() noexcept {
  init_mutex().lock();
}
void atfork_parent() noexcept {
  init_mutex().unlock();
}
void atfork_child() noexcept {
  init_mutex().unlock();
  if (detail::g_mode.load(std::memory_order_relaxed) == ShimMode::kActive) {
    holder().needs_new_slot = true;
    detail::g_state.store(nullptr, std::memory_order_relaxed);
    detail::g_mode.store(ShimMode::kUninitialized, std::memory_order_relaxed);
  }
}

void register_process_hooks_once() {
  static bool done = false;
  if (done) return;
  done = true;
  on_fork(ForkStage::kAccounting, reset_accounting_after_fork);
  on_fork(ForkStage::kAllocation, atfork_child, atfork_prepare, atfork_parent);
  std::atexit(withdraw_at_exit);
}

// Claims a slot for this process, reclaiming dead processes' slots first so
// their bytes return even with no daemon running.
std::optional<unsigned> claim_own_slot(shm::UsageRegion& usage, std::string& error) {
  auto self = shm::self_identity();
  if (!self) {
    error = "cannot identify this process: " + self.error();
    return std::nullopt;
  }
  const auto checker = shm::LivenessChecker::same_namespace(self->pidns_inode);
  const auto reclaimed = shm::reclaim_dead_slots(usage, checker);
  if (reclaimed.slots) {
    log().info("reclaimed {} slot(s) of dead processes ({} bytes)", reclaimed.slots,
               reclaimed.bytes);
  }
  auto slot = shm::claim_slot_reclaiming(usage, *self, shm::monotonic_ns(), checker);
  if (!slot) error = "all process slots of the usage region are taken";
  return slot;
}

// Opens the allocation's regions into `h`, creating them from `spec` when
// the run dir has none yet (standalone). Another process may be creating
// them right now: opening waits for it to publish. Returns why it failed.
// The managed limits file at `path` is the read-only limits mount: its
// identity (device, inode) after the check, for comparing with the mapping.
shm::Parsed<std::pair<std::uint64_t, std::uint64_t>> verified_managed_limits(
    const fs::path& path, const ManagedMount& mount) {
  using Result = shm::Parsed<std::pair<std::uint64_t, std::uint64_t>>;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Result::fail(path.string() + ": " + std::strerror(errno));
  auto why = verify_managed_limits(fd, mount);
  struct stat sb {};
  const bool stat_ok = ::fstat(fd, &sb) == 0;
  ::close(fd);
  if (why) return Result::fail(path.string() + " is not the managed limits mount: " + *why);
  if (!stat_ok) return Result::fail(path.string() + ": cannot stat");
  return Result::ok({static_cast<std::uint64_t>(sb.st_dev), static_cast<std::uint64_t>(sb.st_ino)});
}

std::optional<std::string> open_regions_locked(Holder& h, const fs::path& dir,
                                               const std::vector<shm::GpuQuotaSpec>& spec,
                                               const std::optional<ManagedMount>& managed) {
  const fs::path limits_path = dir / shm::kLimitsName;
  const fs::path usage_path = dir / shm::kUsageName;
  try {
    std::error_code ec;
    if (managed) {
      // Never created here: the node made it, and it is what the mount table says.
      auto verified = verified_managed_limits(limits_path, *managed);
      if (!verified) return verified.error();
      h.limits.emplace(
          shm::LimitsMapping::open(limits_path, shm::Access::kReadOnly, shm::kDefaultPublishWait));
      const auto& file = h.limits->file();
      if (file.dev != verified->first || file.ino != verified->second) {
        h.limits.reset();
        return limits_path.string() + " changed while it was opened: not the managed limits";
      }
      warn_on_disagreement(h.limits->region(), spec, limits_path);
    } else if (fs::exists(limits_path, ec)) {
      h.limits.emplace(
          shm::LimitsMapping::open(limits_path, shm::Access::kReadOnly, shm::kDefaultPublishWait));
      warn_on_disagreement(h.limits->region(), spec, limits_path);
    } else {
      fs::create_directories(dir, ec);
      if (ec) {
        return "cannot create the run dir " + dir.string() + " (CUSHARE_RUN_DIR): " + ec.message();
      }
      shm::RegionCreateOptions opts;
      opts.alloc_id = "standalone-" + std::to_string(getuid());
      opts.flags = shm::kCreatedStandalone;
      h.limits.emplace(
          shm::LimitsMapping::open_or_create(limits_path, opts, [&spec](shm::LimitsRegion& region) {
            for (unsigned i = 0; i < spec.size(); ++i) {
              shm::GpuLimitsSnapshot v;
              v.memory_limit_bytes = spec[i].memory_limit_bytes;
              v.compute_limit_pct = spec[i].compute_limit_pct;
              v.weight = spec[i].weight;
              v.mode = spec[i].mode;
              shm::init_gpu_entry(region, i, spec[i].uuid, v);
            }
          }));
      if (h.limits->created()) {
        log().info("standalone: created {} from the environment", limits_path.string());
      } else {
        warn_on_disagreement(h.limits->region(), spec, limits_path);
      }
    }
    const auto gpu_count = h.limits->region().gpu_count.load(std::memory_order_acquire);
    if (fs::exists(usage_path, ec)) {
      h.usage.emplace(
          shm::UsageMapping::open(usage_path, shm::Access::kReadWrite, shm::kDefaultPublishWait));
    } else {
      shm::RegionCreateOptions opts;
      opts.alloc_id = h.limits->region().header.alloc_id;
      opts.flags = shm::kCreatedStandalone;
      h.usage.emplace(shm::UsageMapping::open_or_create(
          usage_path, opts, [gpu_count](shm::UsageRegion& region) {
            region.gpu_count.store(gpu_count, std::memory_order_relaxed);
          }));
    }
  } catch (const std::exception& e) {
    h.limits.reset();
    h.usage.reset();
    return std::string("cannot use the allocation's regions: ") + e.what();
  }
  return std::nullopt;
}

// A node run dir (the daemon's: allocations below alloc/) is not an
// allocation: a host process that has the shim preloaded by mistake must not
// turn it into one.
bool is_node_run_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir / shm::kAllocDirName, ec) && !fs::exists(dir / shm::kLimitsName, ec);
}

// Where this process's allocation is: the managed one the mount table shows
// (whatever the environment says), else what the environment configures.
// nullopt (after logging) when the environment disables the shim, which it
// may only do for a standalone allocation.
std::optional<fs::path> allocation_dir(const ShimEnv& env,
                                       const std::optional<ManagedMount>& managed) {
  if (managed) {
    static std::once_flag said;
    std::call_once(said, [&] {
      log().info("managed allocation '{}' (limits mounted read-only at {})", managed->alloc_id,
                 managed->limits);
      if (env.disabled)
        log().warn(
            "CUSHARE_DISABLE is ignored: this process belongs to the managed allocation "
            "'{}', which no environment variable can disable",
            managed->alloc_id);
      const char* dir = std::getenv("CUSHARE_RUN_DIR");
      std::error_code ec;
      if (dir && !fs::equivalent(dir, managed->run_dir, ec))
        log().warn(
            "CUSHARE_RUN_DIR={} is ignored: this process belongs to the managed allocation "
            "in {}",
            dir, managed->run_dir);
    });
    return fs::path(managed->run_dir);
  }
  if (env.disabled) return std::nullopt;
  return fs::path(env.run_dir);
}

CUresult initialize_locked() {
  auto env = shim_env_from(shm::process_env(), static_cast<unsigned>(getuid()),
                           fs::is_directory(shm::kDefaultNodeRunDir));
  if (!env) return fail_closed(env.error());
  const auto& managed = managed_allocation();
  const auto alloc_dir = allocation_dir(*env, managed);
  if (!alloc_dir) {
    log().info("CUSHARE_DISABLE is set (standalone): passing every call through");
    detail::g_mode.store(ShimMode::kDisabled, std::memory_order_release);
    return CUDA_SUCCESS;
  }
  Holder& h = holder();
  AllocationState& st = h.state;

  if (h.needs_new_slot) {  // fork child of an initialised parent
    std::string error;
    auto slot = claim_own_slot(h.usage->mutable_region(), error);
    if (!slot) return fail_closed(error);
    st.slot_index = *slot;
    st.slot = &h.usage->mutable_region().slots[*slot];
    h.needs_new_slot = false;
    detail::g_state.store(&st, std::memory_order_release);
    detail::g_mode.store(ShimMode::kActive, std::memory_order_release);
    return CUDA_SUCCESS;
  }

  const RealDriver& r = real();
  if (!r.library_loaded) {
    log().error("libcuda.so.1 was not found");
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (const char* missing = missing_required(r)) {
    log().error("libcuda.so.1 has no {}, which the shim needs (a driver older than CUDA 11.4?)",
                missing);
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  int count = 0;
  if (CUresult rc = r.cuDeviceGetCount(&count); rc != CUDA_SUCCESS) return rc;
  if (count < 0) count = 0;
  if (static_cast<unsigned>(count) > kMaxDevices) count = kMaxDevices;

  std::vector<shm::VisibleGpu> gpus;
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    CUuuid uuid{};
    size_t total = 0;
    if (CUresult rc = r.cuDeviceGet(&dev, i); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = r.cuDeviceGetUuid_v2(&uuid, dev); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = r.cuDeviceTotalMem_v2(&total, dev); rc != CUDA_SUCCESS) return rc;
    gpus.push_back({static_cast<unsigned>(i), format_gpu_uuid(uuid), total});
    st.physical_total[static_cast<unsigned>(i)] = total;
  }
  auto spec = shm::quota_spec_from_env(shm::process_env(), gpus);
  if (!spec) return fail_closed(spec.error());

  const fs::path& dir = *alloc_dir;
  if (!managed && !(h.limits && h.usage) && is_node_run_dir(dir)) {
    return fail_closed(dir.string() +
                       " is a node run dir (the daemon's), not an allocation: set "
                       "CUSHARE_RUN_DIR to the allocation's folder (DIR/alloc/<id>)");
  }
  if (h.limits && h.usage) {  // an NVML query of this process opened them already
    warn_on_disagreement(h.limits->region(), *spec, h.limits->path());
  } else if (auto why = open_regions_locked(h, dir, *spec, managed)) {
    return fail_closed(*why);
  }
  const fs::path usage_path = h.usage->path();

  std::string error;
  auto slot = claim_own_slot(h.usage->mutable_region(), error);
  if (!slot) return fail_closed(error + " (" + usage_path.string() + ")");

  st.limits = &h.limits->region();
  st.usage = &h.usage->mutable_region();
  st.slot_index = *slot;
  st.slot = &st.usage->slots[*slot];
  st.device_count = count;
  st.oom_backtrace = env->oom_backtrace;
  st.run_dir = dir.string();
  st.device_uuid.clear();
  for (int i = 0; i < count; ++i) {
    st.device_uuid.push_back(gpus[static_cast<unsigned>(i)].uuid);
    auto idx = shm::find_gpu_entry(*st.limits, gpus[static_cast<unsigned>(i)].uuid);
    st.gpu_of_device[static_cast<unsigned>(i)] =
        idx && *idx < shm::kMaxGpus ? static_cast<std::uint8_t>(*idx) : kNoGpu;
    if (!idx) {
      log().warn(
          "device {} ({}) is not part of the allocation in {}: device-memory allocations "
          "on it are refused",
          i, gpus[static_cast<unsigned>(i)].uuid, dir.string());
    } else {
      log().info("device {} ({}) -> quota entry {}: {} bytes", i,
                 gpus[static_cast<unsigned>(i)].uuid, *idx, memory_limit(st, *idx));
    }
  }
  register_process_hooks_once();
  log().info("launch gate clock: {}", gate::prepare_gate_clock());
  detail::g_state.store(&st, std::memory_order_release);
  detail::g_mode.store(ShimMode::kActive, std::memory_order_release);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult ensure_initialized() noexcept {
  switch (shim_mode()) {
    case ShimMode::kActive:
    case ShimMode::kDisabled:
      return CUDA_SUCCESS;
    case ShimMode::kFailed:
      return CUDA_ERROR_INVALID_VALUE;
    case ShimMode::kUninitialized:
      break;
  }
  try {
    std::lock_guard lock(init_mutex());
    switch (shim_mode()) {
      case ShimMode::kFailed:
        return CUDA_ERROR_INVALID_VALUE;
      case ShimMode::kUninitialized:
        return initialize_locked();
      default:
        return CUDA_SUCCESS;
    }
  } catch (const std::exception& e) {
    return fail_closed(std::string("initialisation failed: ") + e.what());
  }
}

namespace {

// The GPUs CUDA would show this process, learnt through NVML (whose caller
// has initialised it): physical order filtered and ordered by
// CUDA_VISIBLE_DEVICES, so index-keyed quota variables mean what they mean
// under CUDA.
using GpuList = shm::Parsed<std::vector<shm::VisibleGpu>>;

GpuList nvml_visible_gpus() {
  const RealNvml& n = real_nvml();
  if (!n.library_loaded) return GpuList::fail("libnvidia-ml.so.1 was not found");
  if (const char* missing = missing_required(n)) {
    return GpuList::fail(std::string("libnvidia-ml.so.1 has no ") + missing +
                         ", which the shim needs to list the GPUs");
  }
  unsigned count = 0;
  if (nvml::Return rc = n.nvmlDeviceGetCount_v2(&count); rc != nvml::kSuccess) {
    return GpuList::fail("nvmlDeviceGetCount_v2 failed with NVML error " + std::to_string(rc));
  }
  std::vector<std::string> uuids;
  std::vector<std::uint64_t> totals;
  for (unsigned i = 0; i < count; ++i) {
    nvml::Device dev = nullptr;
    char uuid[nvml::kDeviceUuidBufferSize] = {};
    nvml::Memory mem{};
    if (n.nvmlDeviceGetHandleByIndex_v2(i, &dev) != nvml::kSuccess ||
        n.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) != nvml::kSuccess ||
        n.nvmlDeviceGetMemoryInfo(dev, &mem) != nvml::kSuccess) {
      return GpuList::fail("cannot read GPU " + std::to_string(i) + " through NVML");
    }
    uuids.emplace_back(uuid);
    totals.push_back(mem.total);
  }
  std::vector<shm::VisibleGpu> gpus;
  for (unsigned physical : cuda_visible_order(std::getenv("CUDA_VISIBLE_DEVICES"), uuids)) {
    gpus.push_back({static_cast<unsigned>(gpus.size()), uuids[physical], totals[physical]});
  }
  return GpuList::ok(std::move(gpus));
}

enum class NvmlViewState : int { kUnknown, kReady, kNone, kFailed };
std::atomic<NvmlViewState> g_nvml_view{NvmlViewState::kUnknown};

// Called with init_mutex held, before CUDA is initialised.
NvmlViewState open_regions_for_nvml() {
  auto env = shim_env_from(shm::process_env(), static_cast<unsigned>(getuid()),
                           fs::is_directory(shm::kDefaultNodeRunDir));
  if (!env) {
    log().error("NVML memory figures unavailable: {}", env.error());
    return NvmlViewState::kFailed;
  }
  const auto& managed = managed_allocation();
  const auto alloc_dir = allocation_dir(*env, managed);
  if (!alloc_dir) return NvmlViewState::kNone;
  if (!managed && is_node_run_dir(*alloc_dir)) {
    // A host tool (the device plugin, cushared, nvidia-smi on the node)
    // with the shim preloaded: it has no allocation, it sees the card.
    log().warn("{} is a node run dir, not an allocation: NVML shows the real figures",
               env->run_dir);
    return NvmlViewState::kNone;
  }
  auto gpus = nvml_visible_gpus();
  if (!gpus) {
    log().error("NVML memory figures unavailable: {}", gpus.error());
    return NvmlViewState::kFailed;
  }
  auto spec = shm::quota_spec_from_env(shm::process_env(), *gpus);
  if (!spec) {
    log().error("NVML memory figures unavailable: {}", spec.error());
    return NvmlViewState::kFailed;
  }
  if (auto why = open_regions_locked(holder(), *alloc_dir, *spec, managed)) {
    log().error("NVML memory figures unavailable: {}", *why);
    return NvmlViewState::kFailed;
  }
  return NvmlViewState::kReady;
}

}  // namespace

RegionView region_view() noexcept {
  if (const AllocationState* st = allocation_state()) return {st->limits, st->usage};
  NvmlViewState state = g_nvml_view.load(std::memory_order_acquire);
  if (state == NvmlViewState::kUnknown) {
    try {
      std::lock_guard lock(init_mutex());
      if (const AllocationState* st = allocation_state()) return {st->limits, st->usage};
      state = g_nvml_view.load(std::memory_order_relaxed);
      if (state == NvmlViewState::kUnknown) {
        Holder& h = holder();
        state = h.limits && h.usage ? NvmlViewState::kReady : open_regions_for_nvml();
        g_nvml_view.store(state, std::memory_order_release);
      }
    } catch (const std::exception& e) {
      log().error("NVML memory figures unavailable: {}", e.what());
      state = NvmlViewState::kFailed;
      g_nvml_view.store(state, std::memory_order_release);
    }
  }
  switch (state) {
    case NvmlViewState::kReady:
      return {&holder().limits->region(), &holder().usage->region(), false};
    case NvmlViewState::kFailed:
      return {nullptr, nullptr, true};
    default:
      return {};
  }
}

unsigned current_gpu_index(const AllocationState& st, CUdevice& device) noexcept {
  // One visible device (the usual container): no driver call. Without a
  // current context the real call fails, and the caller rolls back.
  if (st.device_count == 1) {
    device = 0;
    return st.gpu_of_device[0];
  }
  device = -1;
  if (real().cuCtxGetDevice(&device) != CUDA_SUCCESS) {
    device = -1;
    return kNoGpu;
  }
  return gpu_index_of_device(st, device);
}

unsigned current_gpu_index(const AllocationState& st) noexcept {
  CUdevice dev;
  return current_gpu_index(st, dev);
}

unsigned allocation_gpu_index(const AllocationState& st, CUdevice& device) noexcept {
  const unsigned gpu = current_gpu_index(st, device);
  if (device >= 0) note_device_use(st, device);
  return gpu;
}

}  // namespace cushare::shim
