#include "shim/accounting/overhead_estimate.hpp"

namespace cushare::shim {

bool estimate_overhead(const MemorySample& before, const MemorySample& after,
                       std::uint64_t& overhead) noexcept {
  // Every figure is a difference of unsigned counts that may move either
  // way: the sum wraps consistently in two's complement and is read as
  // signed once, at the end, to clamp at zero.
  std::uint64_t grew = 0;
  if (after.process_known) {
    // Not listed before: no context of ours on the device yet.
    grew = after.process_used - (before.process_known ? before.process_used : 0);
  } else if (before.device_known && after.device_known) {
    grew = before.device_free - after.device_free;
  } else {
    return false;
  }
  const std::uint64_t moved =
      before.tracked_known && after.tracked_known ? after.tracked - before.tracked : 0;
  const std::uint64_t pools =
      before.pools_known && after.pools_known ? after.pools - before.pools : 0;
  const auto own = static_cast<std::int64_t>(grew - moved - pools);
  overhead = own > 0 ? static_cast<std::uint64_t>(own) : 0;
  return true;
}

}  // namespace cushare::shim
