"""Check 11: contexts that end under queued work. The context_end_probe of
ctest shim.context_end makes contexts and ends them with their kernels still
queued (cuCtxDestroy, cuDevicePrimaryCtxReset, the primary context's last
release, releases that leave a reference, three threads' releases at once).
Under the shim the launch gate holds each end, forgets the context's events
and streams once the driver destroyed them, and must neither crash nor lose
a launch from its count. Each way runs once on the driver alone first, with
longer kernels and every other round synchronised before its end: the
rounds, whether the primary context's handle stays the same across ends, how
the driver answers a release after a reset, and how long its ending call
takes with work queued against after a synchronisation (whether it waits for
the queued work) are facts about the driver that fakegpu models and the shim
relies on."""

import os
from typing import Any, Dict

from ..procs import Deadline
from ..report import CheckResult
from ..suite_context import Suite
from .common import launches_counted, run_json_probe

SECONDS = 2.0
QUICK_SECONDS = 0.6  # ten runs within a quick run's check budget
MIN_ROUNDS = 5
# The driver-alone runs: 16 kernels of 2 ms queued at each end with work
# (8 ms or more even where the two streams run side by side), so a wait for
# them stands out from the end's own cost, which the idle rounds give.
ALONE_ARGS = ["--kernel-us", "2000", "--idle-every", "2"]
# (the probe's arguments, the shim's compute mode): as ctest runs them. The
# reset runs capped without a daemon, so the local duty cycle's spell-start
# probes run on the tracker's own stream in the context that ends.
WAYS = [
    (["--how", "destroy"], {"CUSHARE_COMPUTE_MODE": "burst"}),
    (["--how", "reset"], {"CUSHARE_COMPUTE_MODE": "capped", "CUSHARE_COMPUTE_LIMIT": "90"}),
    (["--how", "release"], {"CUSHARE_COMPUTE_MODE": "burst"}),
    (["--how", "release", "--extra-reference"], {"CUSHARE_COMPUTE_MODE": "burst"}),
    (["--how", "release", "--threads", "3", "--extra-reference"], {"CUSHARE_COMPUTE_MODE": "burst"}),
]


def probe_path(suite: Suite) -> str:
    return os.path.join(suite.build_dir, "bin", "context_end_probe")


def _seconds(suite: Suite) -> float:
    return QUICK_SECONDS if suite.quick else SECONDS


def _run_probe(suite: Suite, d: Deadline, name: str, args, env) -> Dict[str, Any]:
    seconds = _seconds(suite)
    return run_json_probe(suite, d, name, [probe_path(suite), *args, "--seconds", str(seconds)],
                          env, seconds + 30.0)


def run(suite: Suite, r: CheckResult, d: Deadline) -> None:
    if not os.path.exists(probe_path(suite)):
        r.skip(f"not built: {probe_path(suite)} (target context_end_probe; pack_build.sh packs it)")
        return
    # fakegpu ends the process at any call that names a destroyed handle;
    # a real driver ignores the variable.
    freed = {"FAKEGPU_FREED_HANDLES": "abort"}
    for args, mode in WAYS:
        how = " ".join(args[1:])
        tag = how.replace(" --", "-").replace(" ", "")
        alone = _run_probe(suite, d, f"end-{tag}-driver", args + ALONE_ARGS,
                           suite.tenant_env(None, shim=False, extra=freed))
        folder = suite.alloc_dir(suite.node_run_dir(f"end-{tag}"), "a")
        shimmed = _run_probe(suite, d, f"end-{tag}-shim", args,
                             suite.tenant_env(folder, extra={**freed, **mode}))
        r.details[how] = {"driver_alone": alone, "shim": shimmed}
        out = shimmed["out"]
        r.measure(f"{how}: the probe under the shim ends cleanly", "exit 0, no failed launch",
                  f"exit {shimmed['rc']}, errors {out.get('errors')}",
                  shimmed["rc"] == 0 and out.get("errors") == 0,
                  note="" if shimmed["rc"] == 0 else shimmed["tail"])
        counted = launches_counted(folder)
        r.measure(f"{how}: every launch counted by the gate", f"= the probe's {out.get('launches')}",
                  counted, counted is not None and counted == out.get("launches"))
        r.measure(f"{how}: contexts ended under the shim", f">= {MIN_ROUNDS} in {_seconds(suite):g} s",
                  out.get("rounds"), (out.get("rounds") or 0) >= MIN_ROUNDS,
                  note=f"driver alone: {alone['out'].get('rounds')} (exit {alone['rc']})")
        if args[1] != "destroy":
            r.measure(f"{how}: the primary context's handle changed between rounds",
                      "a fact of the driver (fakegpu: 0)",
                      f"driver alone {alone['out'].get('handle_changes')}, "
                      f"shim {out.get('handle_changes')}", None)
        if args[1] == "reset":
            r.measure(f"{how}: the driver's answer to a release after the reset",
                      "a fact of the driver (documented as safe; fakegpu: CUDA_SUCCESS)",
                      f"driver alone {_release_after_reset(alone['out'])}, "
                      f"shim {_release_after_reset(out)}", None)
        ends_alone, ends_shim = alone["out"].get("end_call_us"), out.get("end_call_us")
        if ends_alone or ends_shim:
            r.measure(f"{how}: the ending call's median (longest), us",
                      "a fact of the driver: does its end wait for queued work?",
                      f"driver alone, 32 ms launched: {_median_max(ends_alone, 'queued')}, "
                      f"idle: {_median_max(ends_alone, 'idle')}; "
                      f"shim, 4.8 ms launched: {_median_max(ends_shim, 'queued')}", None)


def _median_max(ends, which: str) -> str:
    t = (ends or {}).get(which)
    return "—" if not t else f"{t['median']:.0f} ({t['max']:.0f})"


def _release_after_reset(out) -> str:
    r = out.get("release_after_reset") or {}
    return "—" if not r else f"{r.get('last')} ({r.get('errors')} rounds not CUDA_SUCCESS)"
