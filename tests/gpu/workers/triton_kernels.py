"""Check 2f: a Triton kernel (vector add) compiled and launched under the
shim. Triton's launcher calls the driver from its own compiled stub, a launch
path PyTorch does not use; the suite compares the launches the gate counted."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _proto import emit, wait_for  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

LAUNCHES = 200


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def main():
    n = 1 << 20
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    add_kernel[grid](x, y, out, n, BLOCK=1024)  # compiles
    torch.cuda.synchronize()
    emit("ready", triton=triton.__version__)
    for _ in range(LAUNCHES):
        add_kernel[grid](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    emit("done", launches=LAUNCHES, correct=bool(torch.allclose(out, x + y)))
    wait_for("release")


if __name__ == "__main__":
    main()
