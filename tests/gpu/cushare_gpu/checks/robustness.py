"""Check 8: kill -9 a tenant mid-run. Tenant X1 holds 1 GiB of a 2 GiB
allocation and competes for the GPU with tenant Y (another allocation). After
SIGKILL, X's bytes and slot must be reclaimed, Y must get the whole GPU back,
and a new process in X must be able to use the full quota again."""

import time

import cushare_regions as regions

from .. import shares
from ..procs import Deadline
from ..report import CheckResult
from ..suite_context import GiB, MiB, Suite
from .common import gib

SPIN_NS = 500_000
HOLD_MIB = 1024
QUOTA = 2 * GiB


def _clean(m):
    return {k: v for k, v in m.items() if not k.startswith("_")}


def run(suite: Suite, r: CheckResult, d: Deadline) -> None:
    node = suite.node_run_dir("robustness")
    daemon = suite.start_daemon(node, d)
    try:
        _run(suite, r, d, node)
    finally:
        daemon.stop(grace=0.5)


def _run(suite: Suite, r: CheckResult, d: Deadline, node: str) -> None:
    settle = 1.0 if suite.quick else 2.0
    x_dir = suite.alloc_dir(node, "x")
    y = suite.probe("y-spin", ["spin", "--kernel-ns", str(SPIN_NS), "--seconds", "60"],
                    suite.tenant_env(suite.alloc_dir(node, "y"), memory="1Gi", weight=1))
    y.wait_event("ready", d, 60)
    t_solo0 = time.monotonic() + 0.3
    time.sleep(d.cap(0.3 + settle))
    t_solo1 = time.monotonic()

    x1 = suite.probe("x1-holder", ["alloc", "--step-mib", "64", "--max-mib", str(HOLD_MIB),
                                   "--hold", "--spin-ns", str(SPIN_NS)],
                     suite.tenant_env(x_dir, memory="2Gi", weight=1))
    x1.wait_event("allocated", d, 60)
    x1.wait_event("progress", d, 15, where=lambda m: m.get("n", 0) > 0)
    t_busy0 = time.monotonic()
    time.sleep(d.cap(settle))
    t_busy1 = time.monotonic()
    before = regions.used_bytes(x_dir)
    slots_before = len(regions.active_slots(x_dir))

    x1.kill9()
    t_kill = time.monotonic()
    x1.wait_exit(5)
    returned_after = None
    while time.monotonic() - t_kill < 5.0:
        used = regions.used_bytes(x_dir)
        if used == 0 and not regions.active_slots(x_dir):
            returned_after = time.monotonic() - t_kill
            break
        time.sleep(0.05)
    after = regions.used_bytes(x_dir)
    try:
        lease_holder = regions.read(x_dir, "limits").get("gpus", 0, "lease_holder")
    except (regions.RegionError, IndexError):
        lease_holder = None
    t_after0 = max(time.monotonic(), t_kill + 1.0)
    time.sleep(max(0.0, d.cap(t_after0 + settle - time.monotonic())))
    t_after1 = time.monotonic()

    x2 = suite.probe("x2-refill", ["alloc", "--step-mib", "64"], suite.tenant_env(x_dir, memory="2Gi"))
    refill = x2.wait_event("allocated", d, 60)
    x2.wait_event("freed", d, 30)
    x2.stop()
    y.stop()

    pts = shares.progress_points(y.messages)
    solo = shares.rate(pts, t_solo0, t_solo1)
    contended = shares.rate(pts, t_busy0, t_busy1)
    recovered = shares.rate(pts, t_after0, t_after1)
    r.details.update(ledger_before_kill=before, ledger_after_kill=after, refill=_clean(refill),
                     y_rates={"solo": solo, "contended": contended, "after_kill": recovered})
    r.measure("X ledger while X1 holds 1 GiB", f">= {HOLD_MIB} MiB", gib(before),
              None if before is None else before >= HOLD_MIB * MiB)
    r.measure("X1 registered in X's usage region", "1 slot", slots_before, slots_before == 1)
    r.measure("X's bytes and slot reclaimed after kill -9", "within 2 s",
              None if returned_after is None else round(returned_after, 3),
              returned_after is not None and returned_after <= 2.0, unit="s",
              note=f"ledger after: {gib(after)}")
    r.measure("X no longer holds the lease", "0", lease_holder,
              None if lease_holder is None else lease_holder == 0)
    stalled = "no progress from Y in the window (stalled at the gate?)"
    r.measure("Y slowed while competing (both tenants gated)", "< 80% of solo",
              None if not solo or contended is None else round(contended / solo * 100, 1),
              bool(solo) and contended is not None and contended / solo < 0.8, unit="%",
              note="" if solo and contended is not None else stalled)
    r.measure("Y's throughput back to solo from 1 s after the kill", ">= 90% of solo",
              None if not solo or recovered is None else round(recovered / solo * 100, 1),
              bool(solo) and recovered is not None and recovered / solo >= 0.9, unit="%",
              note="" if solo and recovered is not None else stalled)
    r.measure("a new process in X can use the freed quota",
              f"> {gib(QUOTA - HOLD_MIB * MiB)} (impossible if X1's bytes were still charged)",
              gib(refill["obtained"]), refill["obtained"] > QUOTA - HOLD_MIB * MiB,
              note=f"stopped by {refill.get('stop_error')}")
