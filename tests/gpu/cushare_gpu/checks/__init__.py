"""The checks, in run order. Each entry: id, title, time budget in seconds
(hardware; quick mode uses the same caps), whether it needs the daemon, and
the function run(suite, result, deadline)."""

from collections import namedtuple

from . import (capture_neighbour, context_end, graphs, lookups, memory, overhead, robustness, sampling,
               smi, stream_cover, timeshare)

Check = namedtuple("Check", "id title budget_s needs_daemon run")

CHECKS = [
    Check("1", "memory quota, PyTorch default caching allocator", 60, False, memory.torch_default),
    Check("2a", "memory quota, PyTorch expandable_segments (VMM)", 60, False, memory.torch_expandable),
    Check("2b", "memory quota, PyTorch backend:cudaMallocAsync", 60, False, memory.torch_async),
    Check("2c", "memory quota, CuPy default memory pool", 60, False, memory.cupy_pool),
    Check("2d", "memory quota, JAX default preallocation", 75, False, memory.jax_prealloc),
    Check("2e", "memory quota, Driver API (cuMemAlloc_v2 via cuGetProcAddress_v2)", 40, False,
          memory.driver_fill),
    Check("2f", "Triton kernels under the shim (launch gate)", 60, False, memory.triton_kernels),
    Check("3", "nvidia-smi under the shim shows the quota", 30, False, smi.nvidia_smi_view),
    Check("3b", "NVML memory view under the shim", 30, False, smi.nvml_view),
    Check("4", "two processes of one allocation share one quota", 45, False, memory.shared_quota),
    # Early: cheap, and what the daemon's ground truth rests on.
    Check("10", "NVML's per-process samples as the daemon's ground truth reads them", 45, False,
          sampling.run),
    Check("5", "time-sharing: burst 1:3 and capped 30/50", 150, True, timeshare.run),
    Check("6", "overhead: empty-kernel launch and MLP training step", 150, True, overhead.run),
    Check("7", "CUDA graphs: memory counted, launches gated", 60, False, graphs.run),
    Check("8", "robustness: kill -9 a tenant mid-run", 60, True, robustness.run),
    Check("11", "contexts that end under queued work (destroy, reset, release)", 60, False,
          context_end.run),
    Check("12", "a global-mode capture beside another thread's held launches", 40, False,
          capture_neighbour.run),
    Check("13", "a long kernel on one stream beside short ones on another", 40, False,
          stream_cover.run),
    Check("9", "the CUDA runtime's driver lookups (PyTorch, traced by the shim)", 100, False,
          lookups.run),
]


def select(only):
    if not only:
        return list(CHECKS)
    wanted = [x.strip() for x in only.split(",") if x.strip()]
    unknown = [w for w in wanted if not any(c.id == w for c in CHECKS)]
    if unknown:
        raise ValueError(f"unknown check id(s): {', '.join(unknown)} "
                         f"(known: {', '.join(c.id for c in CHECKS)})")
    return [c for c in CHECKS if c.id in wanted]
