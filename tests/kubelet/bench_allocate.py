"""Allocate latency as the kubelet sees it (admission blocks on it): N
sequential Allocate RPCs of distinct 1-unit requests, each writing a new
allocation folder, then N repeats of one request (the idempotent path).
Not a ctest; run by hand (docs/benchmarks.md, "## plugin"):

  /usr/bin/python3 tests/kubelet/bench_allocate.py --plugin build/bin/cushare-device-plugin \\
      --proto-dir plugin/proto --fakegpu-dir build/fakegpu [--count 200]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubelet as kl  # noqa: E402
import scenarios  # noqa: E402


def percentiles(samples):
    s = sorted(samples)
    return (statistics.median(s) * 1e3, s[int(0.99 * (len(s) - 1))] * 1e3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--plugin", required=True)
    p.add_argument("--proto-dir", required=True)
    p.add_argument("--fakegpu-dir", required=True)
    p.add_argument("--count", type=int, default=200)
    args = p.parse_args()
    for name in ("plugin", "proto_dir", "fakegpu_dir"):
        setattr(args, name, os.path.abspath(getattr(args, name)))
    args.library = None
    args.fakegpu_stat = None
    with tempfile.TemporaryDirectory(prefix="cushare-bench-") as tmp:
        kl.generate_stubs(args.proto_dir, os.path.join(tmp, "stubs"))
        devices = ";".join(["H100-80GB:80Gi:132"] * ((args.count + 99) // 100))
        node = scenarios.Node(args, tmp, devices=devices)
        node.start()
        try:
            k = node.kubelet
            ids = k.latest().healthy()[:args.count]
            fresh = []
            for i in ids:
                t = time.perf_counter()
                k.allocate([i])
                fresh.append(time.perf_counter() - t)
            repeat = []
            for _ in range(args.count):
                t = time.perf_counter()
                k.allocate(ids[:25])
                repeat.append(time.perf_counter() - t)
        finally:
            node.stop()
    print("Allocate, new allocation folder: median %.2f ms, p99 %.2f ms (n=%d)"
          % (percentiles(fresh) + (len(fresh),)))
    print("Allocate, repeated (idempotent): median %.2f ms, p99 %.2f ms (n=%d)"
          % (percentiles(repeat) + (len(repeat),)))


if __name__ == "__main__":
    main()
