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
from cushare_test import check  # noqa: E402


def busy_shares(node, procs, seconds, device=0, settle=1.0):
    """Each process's share of wall time on `device`, and the device's."""
    time.sleep(settle)
    before = node.device(device)
    t0 = time.monotonic()
    time.sleep(seconds)
    after = node.device(device)
    span = (time.monotonic() - t0) * 1e9
    b0, b1 = ct.busy_by_pid(before), ct.busy_by_pid(after)
    out = {name: 100.0 * (b1.get(p.pid, 0) - b0.get(p.pid, 0)) / span for name, p in procs.items()}
    out["device"] = 100.0 * (after["busy_ns"] - before["busy_ns"]) / span
    return out


def case_beside_uuid(b):
    """A "*" weight-25 allocation beside a weight-75 one on the GPU's UUID
    share that GPU 25 / 75, one lease at a time."""
    ct.need_root()
    with ct.Node(b) as node:
        node.start_daemon()
        star = node.create("star", "--memory-limit", "4Gi", "--compute-limit", "25", "--mode", "burst")
        uuid = node.create("uuid", "--gpu", "0", "--memory-limit", "4Gi", "--compute-limit", "75", "--mode", "burst")
        procs = {n: ct.Container(node, f).popen([b.sample("spin_worker"), "--kernel-us", "1000",
                                                  "--seconds", "6"])
                 for n, f in (("star", star), ("uuid", uuid))}
        s = busy_shares(node, procs, 3.0)
        for p in procs.values():
            p.kill()
            p.wait()
        busy = s["star"] + s["uuid"]
        check(busy > 0, f"nothing ran: {s}")
        split = 100.0 * s["star"] / busy
        check(abs(split - 25) <= 3, f"the '*' weight-25 tenant got {split:.1f} % of the busy time "
              f"({s})")
        check(s["device"] >= 90, f"device {s['device']:.1f} % busy")
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
                                               "--seconds", "6", "--device", str(i)])
                 for i, f in enumerate(folders)]
        time.sleep(1.0)
        before = [node.device(i) for i in range(2)]
        t0 = time.monotonic()
        time.sleep(3.0)
        after = [node.device(i) for i in range(2)]
        span = (time.monotonic() - t0) * 1e9
        for p in procs:
            p.kill()
            p.wait()
        busy = [100.0 * (after[i]["busy_ns"] - before[i]["busy_ns"]) / span for i in range(2)]
        check(all(x >= 90 for x in busy), f"GPUs busy {busy[0]:.1f} / {busy[1]:.1f} %: the two "
              "'*' allocations were serialised")
        print(f"  two '*' allocations on GPUs 0 and 1: {busy[0]:.1f} / {busy[1]:.1f} % busy")


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    sys.exit(ct.run_cases(CASES))
