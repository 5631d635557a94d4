/* quota_probe: a plain C Driver-API program, compiled and linked against the
 * foreign root's own glibc (bullseye), that allocates device memory in steps
 * until the driver refuses, then prints one JSON line: what cuMemGetInfo
 * showed before and after, the bytes obtained and the refusal's code. It
 * holds the memory for --hold-ms so that ground truth can be sampled.
 *
 *   quota_probe STEP_BYTES HOLD_MS
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int fail(const char* what, CUresult r) {
  printf("{\"error\":\"%s\",\"code\":%d}\n", what, (int)r);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: quota_probe STEP_BYTES HOLD_MS\n");
    return 2;
  }
  const size_t step = strtoull(argv[1], NULL, 10);
  const long hold_ms = strtol(argv[2], NULL, 10);
  CUresult r;
  CUdevice dev;
  CUcontext ctx;
  if ((r = cuInit(0)) != CUDA_SUCCESS) return fail("cuInit", r);
  if ((r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS) return fail("cuDeviceGet", r);
  if ((r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS) return fail("retain", r);
  if ((r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) return fail("cuCtxSetCurrent", r);

  size_t free_before = 0, total_before = 0, free_after = 0, total_after = 0;
  if ((r = cuMemGetInfo(&free_before, &total_before)) != CUDA_SUCCESS) return fail("info", r);
  size_t obtained = 0, count = 0;
  CUdeviceptr ptrs[4096];
  CUresult refusal = CUDA_SUCCESS;
  while (count < sizeof ptrs / sizeof ptrs[0]) {
    refusal = cuMemAlloc(&ptrs[count], step);
    if (refusal != CUDA_SUCCESS) break;
    obtained += step;
    ++count;
  }
  if ((r = cuMemGetInfo(&free_after, &total_after)) != CUDA_SUCCESS) return fail("info", r);
  printf(
      "{\"total_before\":%zu,\"free_before\":%zu,\"total_after\":%zu,\"free_after\":%zu,"
      "\"obtained\":%zu,\"allocations\":%zu,\"refusal\":%d}\n",
      total_before, free_before, total_after, free_after, obtained, count, (int)refusal);
  fflush(stdout);
  struct timespec hold = {hold_ms / 1000, (hold_ms % 1000) * 1000000L};
  nanosleep(&hold, NULL);
  for (size_t i = 0; i < count; ++i) cuMemFree(ptrs[i]);
  cuDevicePrimaryCtxRelease(dev);
  return 0;
}
