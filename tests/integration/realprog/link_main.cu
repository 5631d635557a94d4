// Two units of relocatable device code (nvcc -ptx -rdc=true) that the
// realprog.jit_link program links at run time with cuLinkCreate/AddData/
// Complete: this one calls a function the other defines.
extern __device__ float scaled(float x);

extern "C" __global__ void vec_scale(const float* a, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = scaled(a[i]);
}
