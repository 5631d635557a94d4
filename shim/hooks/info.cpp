// Virtual memory figures: cuMemGetInfo and cuDeviceTotalMem (both ABIs)
// report a GPU the size of the quota (memory_view.hpp). NULL outputs are
// allowed where the driver allows them (OptiX passes free = NULL).
#include <algorithm>

#include "shim/accounting/memory_accounting.hpp"
#include "shim/accounting/memory_view.hpp"
#include "shim/hooks/decls.hpp"
#include "shim/hooks/support.hpp"
#include "shm/quota_ledger.hpp"

namespace cushare::shim {
namespace {

// Returns the virtual view for the current device, from real figures.
MemoryView view_for_gpu(const AllocationState& st, unsigned gpu, std::uint64_t real_total,
                        std::uint64_t real_free) {
  if (gpu >= shm::kMaxGpus) return virtual_memory(0, 0, real_total, real_free);
  return virtual_memory(memory_limit(st, gpu), shm::QuotaLedger(*st.usage).used(gpu), real_total,
                        real_free);
}

}  // namespace
}  // namespace cushare::shim

using namespace cushare::shim;

extern "C" CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemGetInfo_v2)
  CUSHARE_ACCOUNT_OR(r.cuMemGetInfo_v2(free, total))
  size_t real_free = 0, real_total = 0;
  const CUresult rc = r.cuMemGetInfo_v2(&real_free, &real_total);
  if (rc != CUDA_SUCCESS) return rc;
  reclaim_dead_slots_now_and_then(*st);
  const MemoryView v = view_for_gpu(*st, current_gpu_index(*st), real_total, real_free);
  if (free) *free = v.free;
  if (total) *total = v.total;
  return rc;
}

// The 32-bit ABIs answer from the _v2 hooks (one view), and exist only where
// the driver has them.
extern "C" CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemGetInfo)
  size_t f = 0, t = 0;
  const CUresult rc = cuMemGetInfo_v2(&f, &t);
  if (rc != CUDA_SUCCESS) return rc;
  // The 32-bit ABI saturates, as the driver's does.
  if (free) *free = static_cast<unsigned int>(std::min<size_t>(f, 0xffffffffu));
  if (total) *total = static_cast<unsigned int>(std::min<size_t>(t, 0xffffffffu));
  return rc;
}

extern "C" CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuDeviceTotalMem_v2)
  CUSHARE_ACCOUNT_OR(r.cuDeviceTotalMem_v2(bytes, dev))
  size_t real_total = 0;
  const CUresult rc = r.cuDeviceTotalMem_v2(&real_total, dev);
  if (rc != CUDA_SUCCESS || !bytes) return rc;
  const unsigned gpu = gpu_index_of_device(*st, dev);
  *bytes = gpu < cushare::shm::kMaxGpus
               ? std::min<std::uint64_t>(memory_limit(*st, gpu), real_total)
               : 0;
  return rc;
}

extern "C" CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuDeviceTotalMem)
  size_t t = 0;
  const CUresult rc = cuDeviceTotalMem_v2(bytes ? &t : nullptr, dev);
  if (rc == CUDA_SUCCESS && bytes)
    *bytes = static_cast<unsigned int>(std::min<size_t>(t, 0xffffffffu));
  return rc;
}
