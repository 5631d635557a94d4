// Stream-ordered allocation and memory pool hooks: the quota is charged with
// each pool's growth (accounting/pool_accounting.hpp).
#include "shim/accounting/memory_quiescence.hpp"
#include "shim/accounting/pool_accounting.hpp"
#include "shim/hooks/decls.hpp"
#include "shim/hooks/support.hpp"

using namespace cushare::shim;

extern "C" CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemAllocAsync)
  CUSHARE_ACCOUNT_OR(r.cuMemAllocAsync(dptr, bytesize, hStream))
  return pool_alloc(*st, dptr, bytesize, nullptr, hStream, "cuMemAllocAsync",
                    [&] { return r.cuMemAllocAsync(dptr, bytesize, hStream); });
}

extern "C" CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemAllocAsync_ptsz)
  CUSHARE_ACCOUNT_OR(r.cuMemAllocAsync_ptsz(dptr, bytesize, hStream))
  return pool_alloc(*st, dptr, bytesize, nullptr, per_thread_default(hStream),
                    "cuMemAllocAsync_ptsz",
                    [&] { return r.cuMemAllocAsync_ptsz(dptr, bytesize, hStream); });
}

extern "C" CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                            CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemAllocFromPoolAsync)
  CUSHARE_ACCOUNT_OR(r.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream))
  if (!pool) return r.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
  return pool_alloc(*st, dptr, bytesize, pool, hStream, "cuMemAllocFromPoolAsync",
                    [&] { return r.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream); });
}

extern "C" CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                 CUmemoryPool pool, CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemAllocFromPoolAsync_ptsz)
  CUSHARE_ACCOUNT_OR(r.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream))
  if (!pool) return r.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream);
  return pool_alloc(*st, dptr, bytesize, pool, per_thread_default(hStream),
                    "cuMemAllocFromPoolAsync_ptsz",
                    [&] { return r.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream); });
}

extern "C" CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemFreeAsync)
  return async_free(dptr, hStream, [&] { return r.cuMemFreeAsync(dptr, hStream); });
}

extern "C" CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemFreeAsync_ptsz)
  return async_free(dptr, per_thread_default(hStream),
                    [&] { return r.cuMemFreeAsync_ptsz(dptr, hStream); });
}

extern "C" CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemPoolCreate)
  const CUresult rc = r.cuMemPoolCreate(pool, poolProps);
  const AllocationState* st = allocation_state();
  if (!st || rc != CUDA_SUCCESS || !pool || !poolProps || pool_created(*st, *pool, *poolProps))
    return rc;
  r.cuMemPoolDestroy(*pool);  // holds nothing yet
  *pool = nullptr;
  log_pool_table_full("cuMemPoolCreate");
  return CUDA_ERROR_OUT_OF_MEMORY;
}

extern "C" CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemPoolDestroy)
  const AllocationState* st = allocation_state();
  const MemoryOp op(st);
  const CUresult rc = r.cuMemPoolDestroy(pool);
  if (st && rc == CUDA_SUCCESS) pool_destroyed(*st, pool);
  return rc;
}

extern "C" CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  CUSHARE_REAL_OR_NOT_FOUND(r, cuMemPoolTrimTo)
  const AllocationState* st = allocation_state();
  const MemoryOp op(st);
  const CUresult rc = r.cuMemPoolTrimTo(pool, minBytesToKeep);
  if (st && rc == CUDA_SUCCESS) pool_trimmed(*st, pool);
  return rc;
}
