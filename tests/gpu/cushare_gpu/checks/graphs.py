"""Check 7: CUDA graphs. A captured graph's own allocation (alloc, memset and
free nodes) is counted against the quota, a graph that needs more than the
quota is refused, and graph launches pass the launch gate (a 30 % capped
tenant that only launches graphs gets 30 % of the GPU)."""

import cushare_regions as regions

from ..procs import Deadline
from ..report import CheckResult
from ..suite_context import MiB, Suite
from .common import NVML_TOLERANCE, SHARE_TOLERANCE_POINTS, gib

QUOTA_TEXT = "2Gi"
QUOTA = 2 << 30
GRAPH_ALLOC_MIB = 512


def _clean(m):
    return {k: v for k, v in m.items() if not k.startswith("_")}


_UNSIMULATED = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"


def _not_simulated(suite: Suite, r: CheckResult, built, what: str) -> bool:
    """fakegpu may not model graph memory nodes; the hardware run judges them."""
    if suite.simulated and built.get("capture") == _UNSIMULATED:
        r.measure(what, "judged on hardware", built.get("capture"), None,
                  note="fakegpu does not simulate allocation nodes in captured graphs")
        return True
    return False


def _memory(suite: Suite, r: CheckResult, d: Deadline) -> None:
    run_dir = suite.new_dir("standalone", "graph-mem")
    w = suite.probe("graph-mem", ["graph", "--kernels", "4", "--kernel-ns", "100000",
                                  "--alloc-mib", str(GRAPH_ALLOC_MIB), "--wait-go"],
                    suite.tenant_env(run_dir, memory=QUOTA_TEXT))
    built = w.wait_event("graph_built", d, 60)
    r.details["graph_built"] = _clean(built)
    if _not_simulated(suite, r, built, "graph memory counted"):
        w.stop()
        return
    r.measure("graph with an allocation node captured and instantiated", "CUDA_SUCCESS",
              f"{built.get('capture')} / {built.get('instantiate')}",
              built.get("capture") == "CUDA_SUCCESS" and built.get("instantiate") == "CUDA_SUCCESS")
    if built.get("instantiate") != "CUDA_SUCCESS":
        w.stop()
        return
    mem = w.wait_event("graph_mem", d, 60)
    ledger = regions.used_bytes(run_dir)
    w.send("go")
    w.wait_event("freed", d, 30)
    w.stop()
    r.details["graph_mem"] = _clean(mem)
    r.details["ledger_used_after_first_launch"] = ledger
    r.measure("first graph launch", "CUDA_SUCCESS", f"{mem['launch']} / {mem['sync']}",
              mem["launch"] == "CUDA_SUCCESS" and mem["sync"] == "CUDA_SUCCESS")
    drop = mem["mem_free_before"] - mem["mem_free_after"]
    r.measure("free memory under the shim drops by the graph's allocation",
              f">= {GRAPH_ALLOC_MIB} MiB", round(drop / MiB, 1), drop >= GRAPH_ALLOC_MIB * MiB,
              unit="MiB", note=f"graph pool reserved: {mem.get('reserved_current')}")
    r.measure("ledger counts the graph's memory", f">= {GRAPH_ALLOC_MIB} MiB",
              None if ledger is None else round(ledger / MiB, 1),
              None if ledger is None else ledger >= GRAPH_ALLOC_MIB * MiB, unit="MiB")


def _over_quota(suite: Suite, r: CheckResult, d: Deadline) -> None:
    run_dir = suite.new_dir("standalone", "graph-oom")
    baseline = (suite.nvml_memory() or {}).get("used")
    w = suite.probe("graph-oom", ["graph", "--kernels", "1", "--kernel-ns", "10000",
                                  "--alloc-mib", str(QUOTA // MiB + 1024), "--wait-go"],
                    suite.tenant_env(run_dir, memory=QUOTA_TEXT))
    built = w.wait_event("graph_built", d, 60)
    if _not_simulated(suite, r, built, "over-quota graph refused"):
        w.stop()
        return
    outcome = [built.get("capture"), built.get("instantiate")]
    nvml = None
    if built.get("instantiate") == "CUDA_SUCCESS":
        mem = w.wait_event("graph_mem", d, 60)
        outcome += [mem["launch"], mem["sync"]]
        nvml = suite.process_memory(w.pid, baseline)
        w.send("go")
    w.wait_event("freed", d, 30)
    w.stop()
    refused = [x for x in outcome if x not in (None, "CUDA_SUCCESS")]
    r.measure(f"graph needing {QUOTA // MiB + 1024} MiB under a {QUOTA_TEXT} quota",
              "refused (CUDA_ERROR_OUT_OF_MEMORY at capture, instantiate or launch)",
              " / ".join(str(x) for x in outcome), "CUDA_ERROR_OUT_OF_MEMORY" in refused)
    if nvml is not None and nvml.get("bytes") is not None:
        r.measure("NVML used memory of that process", f"<= {gib(QUOTA + NVML_TOLERANCE)}",
                  gib(nvml["bytes"]), nvml["bytes"] <= QUOTA + NVML_TOLERANCE,
                  note=nvml["source"])


def _gated(suite: Suite, r: CheckResult, d: Deadline) -> None:
    node = suite.node_run_dir("graph-gate")
    daemon = suite.start_daemon(node, d)
    try:
        seconds = 2.0 if suite.quick else 4.0
        run_dir = suite.alloc_dir(node, "graphs30")
        w = suite.probe("graph-gated", ["graph", "--kernels", "8", "--kernel-ns", "250000",
                                        "--seconds", str(seconds)],
                        suite.tenant_env(run_dir, memory=QUOTA_TEXT, compute=30, mode="capped"))
        done = w.wait_event("done", d, seconds + 60)
        w.stop()
        usage = ({"gpus": regions.read(run_dir, "usage").gpus()}
                 if regions.used_bytes(run_dir) is not None else None)
    finally:
        daemon.stop(grace=0.5)
    busy = done.get("busy_fraction")
    r.details["gated_run"] = _clean(done)
    if usage:
        r.details["gated_usage"] = usage["gpus"][:1]
    r.measure("GPU time of a capped-30% tenant launching only graphs",
              f"30% ± {SHARE_TOLERANCE_POINTS:.0f} points",
              None if busy is None else round(busy * 100, 2),
              None if busy is None else abs(busy * 100 - 30) <= SHARE_TOLERANCE_POINTS, unit="%",
              note="from completed graphs x 8 kernels x 250 us")
    if usage:
        g = usage["gpus"][0]
        r.measure("graph launches seen by the gate (ledger)", "> 0 launches, some throttled",
                  f"{g['launches']} launches, {g['throttled_launches']} throttled",
                  g["launches"] > 0 and g["throttled_launches"] > 0)


def run(suite: Suite, r: CheckResult, d: Deadline) -> None:
    _memory(suite, r, d)
    _over_quota(suite, r, d)
    if suite.missing_binaries(need_daemon=True):
        r.measure("graph launches gated", "30%", None, None,
                  note="skipped: " + suite.missing_binaries(need_daemon=True))
        return
    _gated(suite, r, d)
