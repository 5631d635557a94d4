"""Check 5: a PyTorch tenant. Runs fp16 matmuls back to back, keeps a few in
flight (CUDA events) and reports completed matmuls as progress lines."""

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _proto import Progress, emit, wait_for  # noqa: E402

import torch  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--inflight", type=int, default=4)
    p.add_argument("--wait-go", action="store_true")
    args = p.parse_args()
    a = torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
    b = torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    emit("ready", pid=os.getpid(), size=args.size)
    if args.wait_go and not wait_for("go"):
        return
    progress = Progress()
    queued = collections.deque()
    done = 0
    start = time.monotonic()
    progress.report(0, force=True)
    while time.monotonic() - start < args.seconds:
        torch.matmul(a, b, out=c)
        ev = torch.cuda.Event()
        ev.record()
        queued.append(ev)
        while queued and (len(queued) > args.inflight or queued[0].query()):
            queued.popleft().synchronize()
            done += 1
        progress.report(done)
    while queued:
        queued.popleft().synchronize()
        done += 1
    progress.report(done, force=True)
    emit("done", n=done, seconds=time.monotonic() - start)


if __name__ == "__main__":
    main()
