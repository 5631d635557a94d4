"""Check 6: what the shim costs. Empty-kernel launches (the probe) and a
small-MLP training loop (PyTorch), each with and without the shim in the same
run, alternated (without, with, without, with) so drift hits both alike.
Ratios are judged on hardware only: on fakegpu every figure is CPU time of a
simulator, and no verdict may rest on CPU timing there."""

import cushare_regions as regions

from .. import shares
from ..procs import Deadline, TimeUp, WorkerFailed
from ..report import CheckResult
from ..suite_context import Suite
from .common import MAX_LAUNCH_RATIO, MAX_STEP_RATIO

ROUNDS = 2


# What the gate did in a shimmed run, from its allocation's usage region:
# launches held (the queue horizon paces a loop that outruns the GPU) and
# spell starts (busy_epoch: each launch after the GPU ran dry marks the
# allocation busy again, records events and wakes the poller).
COUNTERS = ("launches", "throttled_launches", "throttled_ns", "busy_epoch")


def _gate_counters(run_dir: str):
    try:
        if regions.used_bytes(run_dir) is None:
            return None
        g = regions.read(run_dir, "usage").gpus()[0]
        return {k: g[k] for k in COUNTERS if k in g}
    except Exception as e:  # noqa: BLE001 (informational only)
        return {"error": str(e)}


def _launch_once(suite: Suite, d: Deadline, node: str, shim: bool, i: int) -> float:
    count = "20000" if suite.quick else "100000"
    run_dir = suite.alloc_dir(node, f"launch{i}")
    env = suite.tenant_env(run_dir if shim else None, memory="2Gi",
                           shim=shim)
    w = suite.probe(f"launch-{'shim' if shim else 'plain'}", ["launch", "--count", count,
                                                             "--batch", "256"], env)
    got = w.wait_event("launch", d, 90)
    w.stop()
    if shim:
        suite.gate_counters.setdefault("empty-kernel launch", []).append(_gate_counters(run_dir))
    return got["ns_per_launch_median"]


def _mlp_once(suite: Suite, d: Deadline, node: str, shim: bool, i: int) -> float:
    seconds = "1.5" if suite.quick else "3"
    run_dir = suite.alloc_dir(node, f"mlp{i}")
    env = suite.tenant_env(run_dir if shim else None, memory="8Gi", shim=shim)
    w = suite.py_worker(f"mlp-{'shim' if shim else 'plain'}", "torch", "torch_mlp.py",
                        ["--seconds", seconds], env)
    got = w.wait_event("done", d, 120)
    w.stop()
    if shim:
        counters = _gate_counters(run_dir)
        if counters is not None and got.get("steps"):
            counters["steps"] = got["steps"]
        suite.gate_counters.setdefault("MLP training step", []).append(counters)
    return got["ms_per_step"]


def _mlp_profile(suite: Suite, d: Deadline, node: str, shim: bool):
    """The per-call host times of one profiled run (torch_mlp.py --profile)."""
    env = suite.tenant_env(suite.alloc_dir(node, "mlp-profile") if shim else None, memory="8Gi",
                           shim=shim)
    w = suite.py_worker(f"mlp-profile-{'shim' if shim else 'plain'}", "torch", "torch_mlp.py",
                        ["--seconds", "1", "--profile"], env)
    got = w.wait_event("profile", d, 120)
    w.stop()
    return got["calls"]


def _mlp_variant(suite: Suite, d: Deadline, name: str, extra) -> float:
    """ms/step of the MLP under the shim in a standalone allocation (no daemon),
    with `extra` in its environment."""
    env = suite.tenant_env(suite.new_dir("standalone", f"mlp-{name}"), memory="8Gi", extra=extra)
    w = suite.py_worker(f"mlp-{name}", "torch", "torch_mlp.py", ["--seconds", "3"], env)
    got = w.wait_event("done", d, 120)
    w.stop()
    return got["ms_per_step"]


def _profile_where_time_goes(suite: Suite, r: CheckResult, d: Deadline, node: str) -> None:
    """After a missed step ratio on hardware: the step with the interposer alone
    (CUSHARE_DISABLE=1 in a standalone allocation) and with the whole shim
    without a daemon, then which CUDA calls got slower under the shim
    (informational; the verdict stays the ratio's)."""
    try:
        for name, extra in (("interposer-only", {"CUSHARE_DISABLE": "1"}), ("standalone", None)):
            r.measure(f"MLP step, shim {name} (no daemon)", "informational",
                      round(_mlp_variant(suite, d, name, extra), 4), None, unit="ms")
        plain = {c["name"]: c for c in _mlp_profile(suite, d, node, False)}
        shim = _mlp_profile(suite, d, node, True)
    except (WorkerFailed, TimeUp) as e:
        r.measure("MLP step: the calls that grew most under the shim", "informational", None,
                  None, note=f"no profile: {e}")
        return
    r.details["MLP profile"] = {"without_shim": list(plain.values()), "with_shim": shim}
    grew = []
    for c in shim:
        p = plain.get(c["name"])
        if p:
            grew.append((c["count"] * (c["mean_us"] - p["mean_us"]), c, p))
    grew.sort(key=lambda g: -g[0])
    note = "; ".join(f"{c['name']} x{c['count']}: {p['mean_us']:.2f} -> {c['mean_us']:.2f} us"
                     for _, c, p in grew[:4])
    r.measure("MLP step: the calls that grew most under the shim (50 steps)", "informational",
              note or "no call in both profiles", None)


def _judge(r: CheckResult, suite: Suite, label: str, plain, shim, limit: float, unit: str):
    p, s = shares.median(plain), shares.median(shim)
    ratio = shares.ratio(s, p)
    r.details[label] = {"without_shim": plain, "with_shim": shim}
    judged = None if suite.simulated or ratio is None else ratio <= limit
    r.measure(f"{label}: with / without shim", f"<= {limit:.2f}",
              None if ratio is None else round(ratio, 4), judged,
              note=(f"median {p:.4g} -> {s:.4g} {unit}" if ratio is not None else "") +
              ("; fakegpu: not judged (CPU timing)" if suite.simulated else ""))
    r.measure(f"{label}: every run completed", f"{ROUNDS} + {ROUNDS}", f"{len(plain)} + {len(shim)}",
              len(plain) == ROUNDS and len(shim) == ROUNDS)


def _report_counters(suite: Suite, r: CheckResult, label: str) -> None:
    runs = [c for c in suite.gate_counters.get(label, []) if c and "error" not in c]
    r.details.setdefault("gate counters", {})[label] = suite.gate_counters.get(label, [])
    if not runs:
        return
    c = runs[-1]
    per = f" per step {c['busy_epoch'] / c['steps']:.2f}" if c.get("steps") else ""
    r.measure(f"{label}: the gate under the shim (last run)", "informational",
              f"{c.get('launches')} launches, {c.get('throttled_launches')} held "
              f"({c.get('throttled_ns', 0) / 1e6:.1f} ms), {c.get('busy_epoch')} spell starts{per} (warm-up included)",
              None)


def run(suite: Suite, r: CheckResult, d: Deadline) -> None:
    suite.gate_counters = {}
    node = suite.node_run_dir("overhead")
    daemon = suite.start_daemon(node, d)
    try:
        plain, shim = [], []
        for i in range(ROUNDS):
            plain.append(_launch_once(suite, d, node, False, i))
            shim.append(_launch_once(suite, d, node, True, i))
        _judge(r, suite, "empty-kernel launch", plain, shim, MAX_LAUNCH_RATIO, "ns/launch")
        _report_counters(suite, r, "empty-kernel launch")
        torch = suite.framework("torch")
        if not torch.get("available"):
            r.measure("MLP training step: with / without shim", f"<= {MAX_STEP_RATIO:.2f}", None,
                      None, note="skipped: torch unavailable: " + str(torch.get("reason")))
            return
        r.framework = f"torch {torch.get('version')}"
        plain, shim = [], []
        for i in range(ROUNDS):
            plain.append(_mlp_once(suite, d, node, False, i))
            shim.append(_mlp_once(suite, d, node, True, i))
        _judge(r, suite, "MLP training step", plain, shim, MAX_STEP_RATIO, "ms/step")
        _report_counters(suite, r, "MLP training step")
        ratio = shares.ratio(shares.median(shim), shares.median(plain))
        if not suite.simulated and ratio is not None and ratio > MAX_STEP_RATIO:
            _profile_where_time_goes(suite, r, d, node)
    finally:
        daemon.stop(grace=0.5)
