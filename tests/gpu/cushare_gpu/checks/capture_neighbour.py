"""Check 12: a CUDA graph captured in the global mode (as frameworks capture
them) beside another thread of the process. The driver prohibits a thread in
the default interaction mode from synchronisations and queries while another
thread captures in the global mode, and invalidates the capture; fakegpu
models that rule, and the launch gate's own waits and queries on a launching
thread go in the relaxed mode so as never to break such a capture. First the
rule itself, on the driver alone (the other thread queries an event once),
then the capture_neighbour_probe of ctest shim.capture_neighbour under the
shim: the other thread's launches held by the gate's queue bound while the
capture is under way, burst and capped at 50."""

import os
from typing import Any, Dict

from ..procs import Deadline
from ..report import CheckResult
from ..suite_context import Suite
from .common import launches_counted, run_json_probe

MODES = [("burst", {"CUSHARE_COMPUTE_MODE": "burst"}),
         ("capped 50", {"CUSHARE_COMPUTE_MODE": "capped", "CUSHARE_COMPUTE_LIMIT": "50"})]


def probe_path(suite: Suite) -> str:
    return os.path.join(suite.build_dir, "bin", "capture_neighbour_probe")


def _run(suite: Suite, d: Deadline, name: str, args, env) -> Dict[str, Any]:
    return run_json_probe(suite, d, name, [probe_path(suite), *args], env, 30.0)


def run(suite: Suite, r: CheckResult, d: Deadline) -> None:
    if not os.path.exists(probe_path(suite)):
        r.skip(f"not built: {probe_path(suite)} (target capture_neighbour_probe; "
               "pack_build.sh packs it)")
        return
    rule = _run(suite, d, "capture-rule-driver", ["--query"], suite.tenant_env(None, shim=False))
    r.details["rule"] = rule
    r.measure("the driver alone: another thread's cuEventQuery during a global capture",
              "a fact of the driver (fakegpu: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, the capture "
              "ended CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)",
              f"query {rule['out'].get('query')}, capture {rule['out'].get('end_capture')}", None,
              note="" if rule["rc"] == 0 else rule["tail"])
    alone = _run(suite, d, "capture-driver", [], suite.tenant_env(None, shim=False))
    r.details["driver_alone"] = alone
    for name, mode in MODES:
        folder = suite.alloc_dir(suite.node_run_dir(f"capture-{name.replace(' ', '')}"), "a")
        shimmed = _run(suite, d, f"capture-shim-{name.replace(' ', '')}", [],
                       suite.tenant_env(folder, extra=mode))
        r.details[name] = shimmed
        out = shimmed["out"]
        r.measure(f"{name}: the capture beside the held launches ends, and its graph runs",
                  "CUDA_SUCCESS, CUDA_SUCCESS",
                  f"{out.get('end_capture')}, {out.get('graph_launch')} (exit {shimmed['rc']})",
                  shimmed["rc"] == 0 and out.get("end_capture") == "CUDA_SUCCESS"
                  and out.get("graph_launch") == "CUDA_SUCCESS",
                  note=f"driver alone: {alone['out'].get('end_capture')}")
        counted = launches_counted(folder)
        r.measure(f"{name}: every launch counted by the gate",
                  f"= the probe's {out.get('launches')}", counted,
                  counted is not None and counted == out.get("launches"))
