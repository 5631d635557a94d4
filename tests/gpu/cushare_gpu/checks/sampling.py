"""Check 10: the daemon's ground truth against GPU time known to have run.

The daemon judges every tenant by NVML's per-process utilisation samples
(its backstop, the busy scale of caps). How a driver samples is not
documented: whether an idle process gets samples, how many per reading,
at which period. Two plain processes (no shim, no daemon) run spin kernels
of a known length on duty cycles, one with idle stretches longer than any
documented sampling period; the probe reads NVML through the daemon's own
reader every 500 ms (as the daemon does) and keeps the raw samples. Judged:
the GPU time the reader finds for each process against what its completions
say it ran over the same stretch. The raw samples' shape is recorded in the
report for docs/gpu-validation.md."""

import statistics
from typing import Dict, List, Optional

from .. import shares
from ..procs import Deadline, Worker
from ..report import CheckResult
from ..suite_context import Suite

KERNEL_NS = 1_000_000
# (name, busy ms, period ms): idle stretches of 360 ms outlast the sampling
# periods drivers document (1/6 s to 1 s at the short end); 100 of 200 ms is
# a steady half.
WORKERS = [("bursty", 40, 400), ("half", 100, 200)]
INTERVAL_MS = 500  # the daemon's ground-truth interval
# The reading may miss a sample at each end of the stretch (a period in
# progress); beyond that it must agree.
RELATIVE_TOLERANCE = 0.15
ABSOLUTE_TOLERANCE_SHARE = 0.02  # of the stretch


def _seconds(suite: Suite) -> float:
    return 3.0 if suite.quick else 6.0


def _readings(sampler: Worker) -> List[dict]:
    return [m for m in sampler.events("reading") if "from_ns" in m]


def _gpu_time_ns(points, from_s: float, to_s: float) -> Optional[float]:
    a, b = shares.count_at(points, from_s), shares.count_at(points, to_s)
    return None if a is None or b is None else (b - a) * KERNEL_NS


def _within(readings: List[dict], covered: List[list]) -> List[dict]:
    """The readings whose stretch lies inside every worker's progress (the
    readings follow one another, so those kept do too)."""
    if not covered or any(not points for points in covered):
        return []
    first = max(points[0][0] for points in covered)
    last = min(points[-1][0] for points in covered)
    return [m for m in readings if m["from_ns"] / 1e9 >= first and m["to_ns"] / 1e9 <= last]


def _gaps(stamps: List[int]) -> List[int]:
    s = sorted(set(stamps))
    return [b - a for a, b in zip(s, s[1:])]


def _sample_shape(readings: List[dict], pids: Dict[int, str]) -> dict:
    """How the driver sampled: per process and for the device."""
    per_pid: Dict[int, List[list]] = {}
    most_in_one_reading: Dict[int, int] = {}
    device: List[list] = []
    for m in readings:
        counts: Dict[int, int] = {}
        for pid, stamp, util in m.get("process", {}).get("samples", []):
            per_pid.setdefault(pid, []).append([stamp, util])
            counts[pid] = counts.get(pid, 0) + 1
        for pid, n in counts.items():
            most_in_one_reading[pid] = max(most_in_one_reading.get(pid, 0), n)
        device += m.get("device", {}).get("samples", [])
    shape = {"processes": {}, "device": {}}
    for pid, samples in per_pid.items():
        gaps = _gaps([s for s, _ in samples])
        shape["processes"][pids.get(pid, str(pid))] = {
            "samples": len(samples),
            "zero_valued": sum(1 for _, u in samples if u == 0),
            "most_in_one_reading": most_in_one_reading.get(pid, 0),
            "median_gap_us": statistics.median(gaps) if gaps else None,
            "min_gap_us": min(gaps) if gaps else None,
            "values": sorted({u for _, u in samples}),
        }
    gaps = _gaps([s for s, _ in device])
    shape["device"] = {"samples": len(device),
                       "median_gap_us": statistics.median(gaps) if gaps else None,
                       "min_gap_us": min(gaps) if gaps else None,
                       "statuses": sorted({str(m.get("device", {}).get("status"))
                                           for m in readings})}
    return shape


def run(suite: Suite, r: CheckResult, d: Deadline) -> None:
    seconds = _seconds(suite)
    env = suite.tenant_env(None, shim=False)
    workers: Dict[str, Worker] = {}
    for name, busy, period in WORKERS:
        workers[name] = suite.probe(f"sampling-{name}", [
            "spin", "--kernel-ns", str(KERNEL_NS), "--busy-ms", str(busy), "--period-ms",
            str(period), "--seconds", f"{seconds + 2.5:.1f}", "--wait-go"], env)
    for w in workers.values():
        w.wait_event("ready", d, 120)
    for w in workers.values():
        w.send("go")
    sampler_args = ["nvml-sampling", "--seconds", f"{seconds:.1f}", "--interval-ms",
                    str(INTERVAL_MS)]
    if suite.gpu.get("uuid"):
        sampler_args += ["--uuid", suite.gpu["uuid"]]
    sampler = suite.probe("nvml-sampling", sampler_args, env)
    sampler.wait_event("done", d, seconds + 30)
    for w in workers.values():
        w.wait_event("done", d, 30)
    readings = _readings(sampler)[1:]  # the first only sets the starting point
    # Judged only where every worker's completions say what it ran: on a
    # loaded host a worker may begin after the reader's first reading.
    covered = [shares.progress_points(w.messages) for w in workers.values()]
    kept = _within(readings, covered)
    if not kept or len(kept) * 2 < len(readings):
        r.error(f"the workers' progress covers {len(kept)} of the reader's {len(readings)} "
                "readings")
        return
    readings = kept
    from_ns, to_ns = readings[0]["from_ns"], readings[-1]["to_ns"]
    stretch_ns = to_ns - from_ns
    r.measure("stretch the readings cover", f"about {seconds:.0f} s less one sampling period",
              round(stretch_ns / 1e9, 3), None, unit="s")
    pids = {w.pid: name for name, w in workers.items()}
    for name, busy, period in WORKERS:
        w = workers[name]
        found = sum(m.get("busy_ns", {}).get(str(w.pid), 0) for m in readings)
        known = _gpu_time_ns(shares.progress_points(w.messages), from_ns / 1e9, to_ns / 1e9)
        if known is None:
            r.measure(f"{name} ({busy} of every {period} ms): GPU time", "its completions",
                      None, False, note="the worker's progress does not cover the stretch")
            continue
        allowed = max(RELATIVE_TOLERANCE * known, ABSOLUTE_TOLERANCE_SHARE * stretch_ns)
        r.measure(f"{name} ({busy} of every {period} ms): GPU time by the daemon's NVML reader",
                  f"{known / 1e6:.1f} ms (its completions) ± {allowed / 1e6:.1f}",
                  round(found / 1e6, 1), abs(found - known) <= allowed, unit="ms",
                  note=f"{100 * found / stretch_ns:.1f} % of the stretch, "
                       f"{100 * known / stretch_ns:.1f} % by completions")
    shape = _sample_shape(readings, pids)
    r.details["sample_shape"] = shape
    r.details["readings"] = readings
    bursty = shape["processes"].get("bursty", {})
    r.measure("process samples: most of one process in one reading", "recorded",
              max((p["most_in_one_reading"] for p in shape["processes"].values()), default=None),
              None)
    r.measure("bursty process: samples / zero-valued ones", "recorded",
              f"{bursty.get('samples')} / {bursty.get('zero_valued')}", None,
              note=f"{int(stretch_ns / 400e6)} periods of 400 ms in the stretch")
    r.measure("sampling period: process / device (median gap)", "recorded",
              f"{shape['processes'].get('half', {}).get('median_gap_us')} / "
              f"{shape['device'].get('median_gap_us')}", None, unit="us")
