#!/usr/bin/python3
"""Allocations whose limits entry is "*" (cusharectl create without --gpu)
are arbitrated with the other tenants of the GPU their processes use, on
fakegpu ground truth (ctest daemon.any_gpu_*).

  any_gpu.py --build-dir B {beside_uuid,two_gpus}
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import cushare_test as ct  # noqa: E402
import cushare_timing as tm  # noqa: E402
from cushare_test import check  # noqa: E402


def case_beside_uuid(b):
    """A "*" weight-25 allocation beside a weight-75 one on the GPU's UUID
    share that GPU 25 / 75, one lease at a time."""
    ct.need_root()
    with ct.Node(b) as node:
        node.start_daemon()
        star = node.create("star", "--memory-limit", "4Gi", "--compute-limit", "25", "--mode", "burst")
        uuid = node.create("uuid", "--gpu", "0", "--memory-limit", "4Gi", "--compute-limit", "75", "--mode", "burst")
        procs = {n: ct.Container(node, f).popen([b.sample("spin_worker"), "--kernel-us", "1000",
                                                  "--seconds", ct.lifetime(3.0)])
                 for n, f in (("star", star), ("uuid", uuid))}
        node.wait_running(procs)
        s = node.shares(procs, 3.0).shares
        for p in procs.values():
            p.kill()
            p.wait()
        busy = s["star"] + s["uuid"]
        check(busy > 0, f"nothing ran: {s}")
        split = 100.0 * s["star"] / busy
        check(abs(split - 25) <= 3 + tm.SANITIZED_SLACK, f"the '*' weight-25 tenant got "
              f"{split:.1f} % of the busy time ({s})")
        check(s["device"] >= 90 - tm.SANITIZED_SLACK, f"device {s['device']:.1f} % busy")
        print(f"  '*' weight 25 beside UUID weight 75: {s['star']:.1f} / {s['uuid']:.1f} %, "
              f"device {s['device']:.1f} %")


def case_two_gpus(b):
    """Two "*" allocations whose processes use different GPUs do not wait
    for each other: each GPU stays busy."""
    ct.need_root()
    with ct.Node(b, devices="H100:80Gi:132;H100:80Gi:132") as node:
        node.start_daemon()
        folders = [node.create(f"star{i}", "--memory-limit", "4Gi", "--compute-limit", "50", "--mode", "burst")
                   for i in range(2)]
        procs = [ct.Container(node, f).popen([b.sample("spin_worker"), "--kernel-us", "1000",
                                               "--seconds", ct.lifetime(3.0), "--device", str(i)])
                 for i, f in enumerate(folders)]
        for i, p in enumerate(procs):
            node.wait_running({f"star{i}": p}, device=i)
        time.sleep(1.0)

        def sample():  # both GPUs at once: a window measured again is so on both
            return time.monotonic(), [d["busy_ns"] for d in node.stat()["devices"]]

        def busy_pct(before, after):
            span = (after[0] - before[0]) * 1e9
            return [100.0 * (a - b) / span for a, b in zip(after[1], before[1])]

        busy = tm.measure(sample, busy_pct, 3.0, stall_probe=b.tool("host_stall_probe")).shares
        for p in procs:
            p.kill()
            p.wait()
        check(all(x >= 90 - tm.SANITIZED_SLACK for x in busy), f"GPUs busy {busy[0]:.1f} / "
              f"{busy[1]:.1f} %: the two '*' allocations were serialised")
        print(f"  two '*' allocations on GPUs 0 and 1: {busy[0]:.1f} / {busy[1]:.1f} % busy")


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    sys.exit(ct.run_cases(CASES))
