// The shim's own work per alloc+free pair, without any driver: the ledger
// reservation and release on a usage region (the same atomics as in shared
// memory) plus the pointer-table insert and take. This is what the shim adds
// on top of the driver's own cost, measured without fakegpu's noise.
#include <benchmark/benchmark.h>

#include <memory>

#include "shim/accounting/pointer_table.hpp"
#include "shm/layout.hpp"
#include "shm/quota_ledger.hpp"

namespace {

using cushare::shim::Charge;
using cushare::shim::ChargeKind;
using cushare::shim::PointerTable;

void BM_BookkeepingPerAllocFreePair(benchmark::State& state) {
  auto usage = std::make_unique<cushare::shm::UsageRegion>();
  static PointerTable table;
  cushare::shm::QuotaLedger ledger(*usage);
  auto& slot = usage->slots[0];
  std::uint64_t ptr = 0x7f0000000000ULL;
  const std::uint64_t limit = 8ULL << 30;
  for (auto _ : state) {
    ptr += 1 << 20;
    if (!ledger.try_reserve(0, slot, 1 << 20, limit)) state.SkipWithError("refused");
    table.insert(ptr, Charge{1 << 20, 0, ChargeKind::kDevice, 0});
    auto c = table.take(ptr);
    ledger.release(0, slot, c->bytes);
  }
}
BENCHMARK(BM_BookkeepingPerAllocFreePair);

}  // namespace

BENCHMARK_MAIN();
