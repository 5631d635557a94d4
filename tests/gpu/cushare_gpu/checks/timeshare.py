"""Check 5: time-sharing between two busy tenants under the daemon's leases.

Tenant A runs the probe's spin kernel (%globaltimer, a known length); tenant
B runs a PyTorch matmul loop (a second spin tenant when PyTorch is missing).
Each tenant's achieved share is its throughput in a common window divided by
its throughput alone on the GPU; NVML's per-process utilisation and, on
fakegpu, the simulator's ground truth are reported beside it."""

import time
from typing import Dict, List, Optional

from .. import shares
from ..procs import Deadline, TimeUp, Worker
from ..report import CheckResult
from ..suite_context import Suite
from .common import SHARE_TOLERANCE_POINTS

SPIN_NS = 500_000


class Tenant:
    def __init__(self, key: str, kind: str):
        self.key, self.kind = key, kind


def _timing(suite: Suite):
    # (warm-up before the window, window, solo window)
    return (0.5, 2.0, 1.5) if suite.quick else (1.5, 5.0, 3.0)


def _start(suite: Suite, t: Tenant, node: str, alloc_id: str, seconds: float, **limits) -> Worker:
    run_dir = suite.alloc_dir(node, alloc_id)
    if t.kind == "spin":
        env = suite.tenant_env(run_dir, memory="2Gi", **limits)
        return suite.probe(f"spin-{alloc_id}", ["spin", "--kernel-ns", str(SPIN_NS), "--seconds",
                                                f"{seconds:.2f}", "--wait-go"], env)
    env = suite.tenant_env(run_dir, memory="8Gi", **limits)
    return suite.py_worker(f"matmul-{alloc_id}", "torch", "torch_matmul.py",
                           ["--seconds", f"{seconds:.2f}", "--wait-go"], env)


def _run_together(suite: Suite, d: Deadline, workers: List[Worker], warm: float, window: float):
    """Starts the tenants at once; returns (t0, t1, fakegpu snapshots, nvml sampler)."""
    for w in workers:
        w.wait_event("ready", d, 120)
    for w in workers:
        w.send("go")
    t0 = time.monotonic() + warm
    t1 = t0 + window
    time.sleep(max(0.0, d.cap(warm)))
    snap0 = suite.fakegpu_snapshot()
    sampler = None
    if suite.nvml is not None:
        from ..nvml import UtilizationSampler
        sampler = UtilizationSampler(suite.nvml, suite.nvml_handle)
    while time.monotonic() < t1:
        time.sleep(min(0.5, max(0.0, t1 - time.monotonic())))
        d.cap(1.0)
        if sampler:
            sampler.poll()
    snap1 = suite.fakegpu_snapshot()
    for w in workers:
        # Tenants stop 1 s after the window; a throttled one drains its queue.
        w.wait_event("done", d, 20)
    return t0, t1, (snap0, snap1), sampler


def _truth_share(snaps, pid: int) -> Optional[float]:
    s0, s1 = snaps
    if not s0 or not s1:
        return None

    def busy(s):
        for dev in s.get("devices", [])[:1]:
            for p in dev.get("processes", []):
                if p.get("pid") == pid:
                    return p.get("busy_ns", 0)
        return 0

    dt = s1["_t"] - s0["_t"]
    return (busy(s1) - busy(s0)) / 1e9 / dt if dt > 0 else None


def _solo_rate(suite: Suite, d: Deadline, t: Tenant, node: str) -> Optional[float]:
    warm, _, solo = _timing(suite)
    w = _start(suite, t, node, f"solo-{t.kind}", warm + solo + 0.5)
    t0, t1, _, _ = _run_together(suite, d, [w], warm, solo)
    w.stop()
    return shares.rate(shares.progress_points(w.messages), t0, t1)


def run(suite: Suite, r: CheckResult, d: Deadline) -> None:
    torch = suite.framework("torch")
    a = Tenant("A", "spin")
    b = Tenant("B", "matmul" if torch.get("available") else "spin")
    r.measure("tenant B workload", "PyTorch matmul loop", b.kind, None,
              note="" if b.kind != "spin" else
              "PyTorch unavailable (" + str(torch.get("reason")) + "): a second spin tenant")
    if b.kind != "spin":
        r.framework = f"torch {torch.get('version')}"
    warm, window, _ = _timing(suite)
    node = suite.node_run_dir("timeshare")
    daemon = suite.start_daemon(node, d)
    try:
        solo = {"spin": _solo_rate(suite, d, a, node)}
        if b.kind != "spin":
            solo[b.kind] = _solo_rate(suite, d, b, node)
        r.details["solo_rate_per_s"] = solo
        scenarios = [
            ("burst 1:3", dict(A=dict(mode="burst", compute=100, weight=1),
                               B=dict(mode="burst", compute=100, weight=3)),
             shares.burst_targets({"A": 1, "B": 3})),
            ("capped 30/50", dict(A=dict(mode="capped", compute=30, weight=30),
                                  B=dict(mode="capped", compute=50, weight=50)),
             shares.capped_targets({"A": 30, "B": 50})),
        ]
        for n, (label, limits, targets) in enumerate(scenarios):
            if d.remaining() < warm + window + 10:
                raise TimeUp(f"time budget exhausted before the '{label}' scenario")
            ws: Dict[str, Worker] = {
                t.key: _start(suite, t, node, f"s{n}{t.key}", warm + window + 1.0, **limits[t.key])
                for t in (a, b)
            }
            t0, t1, snaps, sampler = _run_together(suite, d, list(ws.values()), warm, window)
            for w in ws.values():
                w.stop()
            busy_total = 0.0
            for t in (a, b):
                w = ws[t.key]
                rate = shares.rate(shares.progress_points(w.messages), t0, t1)
                achieved = None if rate is None or not solo.get(t.kind) else rate / solo[t.kind]
                target = targets[t.key]
                err = shares.error_points(achieved, target)
                # No progress in the window is a stalled tenant: a failure.
                r.measure(f"{label}: tenant {t.key} ({t.kind}) share from throughput",
                          f"{target:.0%} ± {SHARE_TOLERANCE_POINTS:.0f} points",
                          None if achieved is None else round(achieved * 100, 2),
                          bool(shares.within(achieved, target, SHARE_TOLERANCE_POINTS)), unit="%",
                          note=f"error {err} points" if achieved is not None else
                          "no progress in the window (stalled?)")
                if sampler is not None:
                    util = sampler.mean_percent(w.pid)
                    r.measure(f"{label}: tenant {t.key} NVML SM utilisation", f"{target:.0%}",
                              util, None, unit="%",
                              note=("no samples for this pid" if util is None else
                                    f"error {round(util - target * 100, 2)} points; informational"))
                truth = _truth_share(snaps, w.pid)
                if truth is not None:
                    busy_total += truth
                    r.measure(f"{label}: tenant {t.key} fakegpu ground-truth share",
                              f"{target:.0%} ± {SHARE_TOLERANCE_POINTS:.0f} points",
                              round(truth * 100, 2),
                              shares.within(truth, target, SHARE_TOLERANCE_POINTS), unit="%",
                              note=f"error {shares.error_points(truth, target)} points")
            if snaps[0] and snaps[1]:
                r.measure(f"{label}: device busy (fakegpu ground truth)",
                          f"{sum(targets.values()):.0%}", round(busy_total * 100, 2), None,
                          unit="%", note="informational")
    finally:
        daemon.stop(grace=0.5)
