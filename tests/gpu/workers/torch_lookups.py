"""Check 9: PyTorch starts CUDA (the runtime resolves the driver's entry
points through cuGetProcAddress, which the shim logs at trace level), runs a
matrix product (cuBLAS resolves its own) and synchronises."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _proto import emit  # noqa: E402

import torch  # noqa: E402


def main():
    a = torch.randn(256, 256, device="cuda")
    b = (a @ a).sum()
    torch.cuda.synchronize()
    emit("done", value=float(b.item()), cuda=torch.version.cuda)


if __name__ == "__main__":
    main()
