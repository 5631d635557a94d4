// Micro-benchmarks of the shm/ hot paths (Google Benchmark). Figures and the
// command that produced them: docs/benchmarks.md, section "shm".
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "shm/limits_seqlock.hpp"
#include "shm/process_slots.hpp"
#include "shm/quota_ledger.hpp"
#include "shm/region_file.hpp"

namespace cushare::shm {
namespace {

// One real usage region file (MAP_SHARED, as in production), shared by all
// benchmarks of the run.
struct Fixture {
  std::filesystem::path dir;
  std::unique_ptr<UsageMapping> usage;
  std::unique_ptr<LimitsMapping> limits;
  ProcessIdentity self;
  Fixture() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cushare-bench-XXXXXX").string();
    dir = mkdtemp(tmpl.data());
    usage = std::make_unique<UsageMapping>(UsageMapping::create(dir / "usage", {"bench"}));
    limits = std::make_unique<LimitsMapping>(
        LimitsMapping::create(dir / "limits", {"bench"}, [](LimitsRegion& r) {
          init_gpu_entry(r, 0, kAnyGpu, {.memory_limit_bytes = 1ull << 40});
        }));
    self = *self_identity();
  }
  ~Fixture() {
    usage.reset();
    limits.reset();
    std::filesystem::remove_all(dir);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_ReserveRelease(benchmark::State& state) {
  UsageRegion& usage = fixture().usage->mutable_region();
  // Each thread its own slot, all on GPU 0's one total (contended when >1 thread).
  ProcessSlot& slot = usage.slots[100 + state.thread_index()];
  QuotaLedger ledger(usage);
  constexpr std::uint64_t kLimit = 1ull << 40;
  for (auto _ : state) {
    const bool ok = ledger.try_reserve(0, slot, 4096, kLimit);
    benchmark::DoNotOptimize(ok);
    ledger.release(0, slot, 4096);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ReserveRelease)->Threads(1);
BENCHMARK(BM_ReserveRelease)->Threads(2)->UseRealTime();

void BM_ReserveRefused(benchmark::State& state) {
  UsageRegion& usage = fixture().usage->mutable_region();
  ProcessSlot& slot = usage.slots[200];
  QuotaLedger ledger(usage);
  for (auto _ : state) {
    const bool ok = ledger.try_reserve(1, slot, 4096, 1024);  // over the quota: refused
    benchmark::DoNotOptimize(ok);
  }
}
BENCHMARK(BM_ReserveRefused);

void BM_ReadGpuLimits(benchmark::State& state) {
  const LimitsRegion& limits = fixture().limits->region();
  for (auto _ : state) {
    const auto s = read_gpu_limits(limits, 0);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_ReadGpuLimits);

void BM_SlotClaimRelease(benchmark::State& state) {
  UsageRegion& usage = fixture().usage->mutable_region();
  const ProcessIdentity self = fixture().self;
  for (auto _ : state) {
    auto i = claim_slot(usage, self, 1);
    if (!i) {
      state.SkipWithError("no free slot");
      break;
    }
    auto bytes = release_slot(usage, *i);
    benchmark::DoNotOptimize(bytes);
  }
}
BENCHMARK(BM_SlotClaimRelease);

}  // namespace
}  // namespace cushare::shm

BENCHMARK_MAIN();
