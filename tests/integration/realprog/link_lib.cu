// The second unit of realprog.jit_link: the function and the global the
// first unit's kernel reaches only through the JIT linker.
__device__ float link_factor = 3.0f;

__device__ float scaled(float x) { return link_factor * x; }
