"""Check 1/2: fill a quota with PyTorch tensors until torch.OutOfMemoryError.
The allocator backend comes from PYTORCH_CUDA_ALLOC_CONF (set by the suite)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _proto import emit, fill, wait_for  # noqa: E402

import torch  # noqa: E402

MiB = 1 << 20


def main():
    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    props_total = torch.cuda.get_device_properties(0).total_memory
    # Load cuBLAS and a few kernels first, as a real job would: lazily loaded
    # modules are context memory the quota must absorb.
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum().item()
    emit("ready", mem_get_info_total=total, mem_get_info_free=free, props_total=props_total,
         torch=torch.__version__, alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))

    def alloc(n):
        return torch.empty(n, dtype=torch.uint8, device="cuda")

    blocks, held, err = fill(alloc, (oom_type,), [256 * MiB, 32 * MiB, 4 * MiB])
    torch.cuda.synchronize()
    try:
        reserved = torch.cuda.memory_reserved()
    except Exception:
        reserved = None
    free_after, total_after = torch.cuda.mem_get_info()
    emit("allocated", held=held + a.numel() * 4, reserved=reserved,
         oom_type=None if err is None else type(err).__name__,
         expected_oom=oom_type.__name__,
         oom_message=None if err is None else str(err).splitlines()[0][:300],
         mem_get_info_total=total, mem_get_info_after=[free_after, total_after],
         props_total=props_total)
    wait_for("release")
    del blocks, a
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    emit("freed", mem_get_info=list(torch.cuda.mem_get_info()))


if __name__ == "__main__":
    main()
