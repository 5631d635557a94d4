// The device code of the real-program tests (realprog.*), compiled by the
// toolkit's nvcc into a fatbin (-fatbin -arch=sm_90: SASS and PTX for
// compute capability 9.0), which the programs load as the CUDA runtime does.
// fakegpu runs kernels as timed no-ops: the tests check what the driver
// reports, not this arithmetic.

// A global the programs find with cuLibraryGetGlobal and write from the host.
__device__ float scale = 2.0f;

extern "C" __global__ void vec_add(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = scale * (a[i] + b[i]);
}
