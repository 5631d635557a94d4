"""Check 13: a long kernel on one stream beside short ones on another. A GPU
runs a process's streams side by side, and the launch gate's batches cover
every stream they went to (a join stream waits for each), so:
- on the driver alone, whether the short kernels end while the long one runs
  (the fact both checks below rest on; fakegpu: yes);
- under the shim, burst and capped at 50, the allocation's drain mark,
  sampled every 0.5 ms, never reaches the long kernel's submission before it
  can have ended (a 400 ms kernel, then two short ones synchronised);
- and 200 short kernels beside a 2 s one are not held at the gate until it
  ends (a launch whose stream has nothing queued goes beside a batch over
  several streams, or one of another stream alone that its stream does not
  wait behind: "paused", the short ones 5 ms after the long one, which the
  gate's poller then records on its own), nor 5000 of 20 us synchronised only at the end beside a 1 s one
  kept to one in flight at a time (the stream keeps a queue of its own up
  to the horizon); their time against the driver alone's.
The stream_cover_probe of ctest shim.stream_cover."""

import os

import drain_marks

from ..procs import Deadline
from ..report import CheckResult
from ..suite_context import Suite
from .common import run_json_probe

MODES = [("burst", {"CUSHARE_COMPUTE_MODE": "burst"}),
         ("capped 50", {"CUSHARE_COMPUTE_MODE": "capped", "CUSHARE_COMPUTE_LIMIT": "50"})]
BESIDE = ["--long-us", "2000000", "--short-launches", "200", "--sync-every", "8"]
PAUSED = BESIDE + ["--pause-us", "5000", "--warmup-on", "long"]
DEEP = ["--long-us", "1000000", "--short-us", "20", "--short-launches", "5000",
        "--sync-every", "5000"]


def probe_path(suite: Suite) -> str:
    return os.path.join(suite.build_dir, "bin", "stream_cover_probe")


def run(suite: Suite, r: CheckResult, d: Deadline) -> None:
    if not os.path.exists(probe_path(suite)):
        r.skip(f"not built: {probe_path(suite)} (target stream_cover_probe; "
               "pack_build.sh packs it)")
        return
    alone = run_json_probe(suite, d, "cover-driver", [probe_path(suite), *BESIDE],
                           suite.tenant_env(None, shim=False), 30.0)
    r.details["driver_alone"] = alone
    side_by_side = alone["out"].get("long_pending_after_short")
    r.measure("the driver alone: 200 short kernels end while a 2 s one runs on another stream",
              "a fact of the driver (fakegpu: yes)",
              f"{side_by_side}, {alone['out'].get('short_phase_ns', 0) / 1e6:.0f} ms", None,
              note="" if alone["rc"] == 0 else alone["tail"])
    deep_alone = run_json_probe(suite, d, "cover-deep-driver", [probe_path(suite), *DEEP],
                                suite.tenant_env(None, shim=False), 30.0)
    r.details["deep_driver_alone"] = deep_alone
    deep_side_by_side = deep_alone["out"].get("long_pending_after_short")
    deep_alone_ms = deep_alone["out"].get("short_phase_ns", 0) / 1e6
    r.measure("the driver alone: 5000 kernels of 20 us end while a 1 s one runs on another "
              "stream", "a fact of the driver (fakegpu: yes, 80-90 ms)",
              f"{deep_side_by_side}, {deep_alone_ms:.0f} ms", None,
              note="" if deep_alone["rc"] == 0 else deep_alone["tail"])
    for name, mode in MODES:
        tag = name.replace(" ", "")
        for what, args in (("cover", ["--long-us", "400000"]), ("beside", BESIDE),
                           ("paused", PAUSED), ("deep", DEEP)):
            folder = suite.alloc_dir(suite.node_run_dir(f"cover-{what}-{tag}"), "a")
            with drain_marks.DrainSampler(folder) as sampler:
                shimmed = run_json_probe(suite, d, f"cover-{what}-{tag}",
                                         [probe_path(suite), *args],
                                         suite.tenant_env(folder, extra=mode), 30.0)
            out = shimmed["out"]
            r.details[f"{what} {name}"] = {**shimmed, "samples": len(sampler.samples)}
            early = len(drain_marks.early_marks(out, sampler.samples)) if out else 0
            # Only a run whose long kernel outlived the short ones says anything.
            pending = out.get("long_pending_after_short")
            r.measure(f"{name}, {what}: drain marks past the long kernel's submission before it "
                      f"could end", "0 of >= 100 samples, the long kernel still running after "
                      "the short ones",
                      f"{early} of {len(sampler.samples)}, still running {pending} "
                      f"(exit {shimmed['rc']})",
                      None if not side_by_side else
                      shimmed["rc"] == 0 and bool(out) and len(sampler.samples) >= 100
                      and early == 0 and bool(pending))
            if what == "deep":
                ms = out.get("short_phase_ns", 0) / 1e6
                r.measure(f"{name}: 5000 kernels of 20 us beside a 1 s one, not one at a time",
                          "ended while it ran, as on the driver alone (time: informational; "
                          "fakegpu: burst about the driver's, capped 50 about twice)",
                          f"{pending}, {ms:.0f} ms against {deep_alone_ms:.0f} ms alone",
                          None if not deep_side_by_side else bool(pending),
                          note="" if deep_side_by_side else
                          "the driver ran them after the long one")
            if what in ("beside", "paused"):
                later = " launched 5 ms before them" if what == "paused" else ""
                r.measure(f"{name}: 200 short kernels beside a 2 s one{later} not held until "
                          "it ends",
                          "ended while it ran, as on the driver alone",
                          f"{pending}, {out.get('short_phase_ns', 0) / 1e6:.0f} ms",
                          None if not side_by_side else bool(pending),
                          note="" if side_by_side else "the driver ran them one after another")
