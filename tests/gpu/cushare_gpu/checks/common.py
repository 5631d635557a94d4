"""Shared thresholds and helpers of the checks. The tolerances are the
suite's documented contract (docs/gpu-validation.md)."""

import json
from typing import Any, Dict, Optional

import cushare_regions as regions

from ..procs import Deadline
from ..report import CheckResult
from ..suite_context import GiB, MiB, Suite

QUOTA = 4 * GiB
QUOTA_TEXT = "4Gi"
# NVML's per-process figure includes what no allocation call returns: the
# context, lazily loaded modules, the cuBLAS/cuDNN handles' internal state.
# The quota covers the context as measured at creation; what is loaded later
# may exceed it by up to this much before the daemon's NVML reconciliation
# catches up.
NVML_TOLERANCE = 128 * MiB
# A quota must be usable, not only enforced: a tenant that fills it must get
# at least this fraction of it (the rest is context overhead and step rounding).
MIN_FILL = 0.85
# Time-sharing: achieved share vs. target, in percentage points.
SHARE_TOLERANCE_POINTS = 5.0
# Overhead: ratio with/without the shim, judged on hardware only.
MAX_LAUNCH_RATIO = 1.10
MAX_STEP_RATIO = 1.05


def gib(n) -> str:
    return "—" if n is None else f"{n / GiB:.3f} GiB"


def judge_memory(result: CheckResult, quota: int, held, nvml: dict, what: str,
                 whose: str = "the process") -> None:
    """The common verdicts of a fill-until-refused run: the program got no
    more than the quota, NVML (outside the quota) agrees within tolerance, and
    the quota was usable."""
    result.measure(f"{what} held when refused", f"<= {gib(quota)}", gib(held),
                   None if held is None else held <= quota)
    used = nvml.get("bytes")
    result.measure(f"NVML used memory of {whose} (outside the shim)",
                   f"<= quota + {NVML_TOLERANCE // MiB} MiB = {gib(quota + NVML_TOLERANCE)}",
                   gib(used), None if used is None else used <= quota + NVML_TOLERANCE,
                   note=nvml.get("source", ""))
    usable = used if used is not None else held
    result.measure("quota usable (NVML used, else held)", f">= {MIN_FILL:.0%} of quota",
                   gib(usable), None if usable is None else usable >= MIN_FILL * quota)


def run_json_probe(suite: Suite, d: Deadline, name: str, argv, env,
                   timeout: float) -> Dict[str, Any]:
    """A probe that prints one JSON line and exits, run to its end (stopped
    past `timeout`): {"rc", "out" (its JSON line, {} without one), "tail"}."""
    w = suite.procs.spawn(name, argv, env)
    rc = w.wait_exit(d.cap(timeout))
    w.stop(grace=0.5)  # stops it if it overstayed; waits for the reader's last line
    out: Dict[str, Any] = {}
    for line in reversed(list(w.tail)):
        if line.startswith("{"):
            try:
                out = json.loads(line)
            except ValueError:
                pass
            break
    return {"rc": rc, "out": out, "tail": w.last_output()}


def launches_counted(folder: str) -> Optional[int]:
    """The launches the gate counted in an allocation folder's usage region."""
    try:
        return regions.read(folder, "usage").get("gpus", 0, "launches")
    except (regions.RegionError, OSError, IndexError):
        return None
