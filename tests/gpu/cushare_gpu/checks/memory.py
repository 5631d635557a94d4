"""Checks 1, 2 and 4: device-memory quotas as frameworks and drivers see them."""



from ..procs import Deadline
from ..report import CheckResult
from ..suite_context import MiB, Suite
from .common import QUOTA, QUOTA_TEXT, gib, judge_memory


def _framework_fill(suite: Suite, r: CheckResult, d: Deadline, framework: str, script: str,
                    extra_env=None, args=None):
    """Runs a framework worker that fills a 4Gi quota; returns (allocated msg, nvml)."""
    fw = suite.framework(framework)
    if not fw.get("available"):
        r.skip(f"{framework} unavailable: {fw.get('reason')}")
        return None, None
    r.framework = f"{framework} {fw.get('version')} ({fw.get('python')})"
    run_dir = suite.new_dir("standalone", r.id)
    env = suite.tenant_env(run_dir, memory=QUOTA_TEXT, extra=extra_env)
    baseline = (suite.nvml_memory() or {}).get("used")
    w = suite.py_worker(script.replace(".py", ""), framework, script, args or [], env)
    ready = w.wait_event("ready", d, 120)
    r.details["ready"] = {k: v for k, v in ready.items() if not k.startswith("_")}
    got = w.wait_event("allocated", d, 120)
    nvml = suite.process_memory(w.pid, baseline)
    r.details["allocated"] = {k: v for k, v in got.items() if not k.startswith("_")}
    r.details["nvml"] = nvml
    w.send("release")
    w.wait_event("freed", d, 30)
    w.stop()
    return got, nvml


def judge_framework(r: CheckResult, got, nvml, total_key="mem_get_info_total"):
    total = got.get(total_key)
    r.measure("reported total memory", f"= quota {gib(QUOTA)}", gib(total), total == QUOTA)
    oom = got.get("oom_type")
    r.measure("refusal raised as the framework's out-of-memory error", got.get("expected_oom"),
              oom, oom is not None and oom == got.get("expected_oom"),
              note=(got.get("oom_message") or "")[:160])
    judge_memory(r, QUOTA, got.get("held"), nvml, "tensors")
    if got.get("reserved") is not None:
        r.measure("allocator reserved bytes", f"<= {gib(QUOTA)}", gib(got["reserved"]),
                  got["reserved"] <= QUOTA)


def torch_default(suite: Suite, r: CheckResult, d: Deadline) -> None:
    got, nvml = _framework_fill(suite, r, d, "torch", "torch_memory.py")
    if got:
        judge_framework(r, got, nvml)
        props = got.get("props_total")
        r.measure("torch.cuda.get_device_properties().total_memory", f"= {gib(QUOTA)}",
                  gib(props), None, note="informational (comes from cuDeviceTotalMem_v2)")


def torch_expandable(suite: Suite, r: CheckResult, d: Deadline) -> None:
    got, nvml = _framework_fill(suite, r, d, "torch", "torch_memory.py",
                                {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    if got:
        judge_framework(r, got, nvml)


def torch_async(suite: Suite, r: CheckResult, d: Deadline) -> None:
    got, nvml = _framework_fill(suite, r, d, "torch", "torch_memory.py",
                                {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
    if got:
        judge_framework(r, got, nvml)


def cupy_pool(suite: Suite, r: CheckResult, d: Deadline) -> None:
    got, nvml = _framework_fill(suite, r, d, "cupy", "cupy_memory.py")
    if got:
        judge_framework(r, got, nvml)


def jax_prealloc(suite: Suite, r: CheckResult, d: Deadline) -> None:
    got, nvml = _framework_fill(suite, r, d, "jax", "jax_memory.py")
    if got:
        judge_jax(r, got, nvml)


def judge_jax(r: CheckResult, got, nvml) -> None:
    limit = got.get("bytes_limit")
    r.measure("JAX started and computed on the GPU", "true", got.get("computed"),
              got.get("computed") is True, note=str(got.get("platform")))
    r.measure("preallocated pool (bytes_limit) sized from the quota",
              "65%..80% of quota (default fraction 75%)", gib(limit),
              None if limit is None else 0.65 * QUOTA <= limit <= 0.80 * QUOTA)
    oom = got.get("oom_type")
    r.measure("filling the pool ends in RESOURCE_EXHAUSTED", "XlaRuntimeError RESOURCE_EXHAUSTED",
              oom, oom is not None and "RESOURCE_EXHAUSTED" in (got.get("oom_message") or ""),
              note=(got.get("oom_message") or "")[:160])
    judge_memory(r, QUOTA, got.get("held"), nvml, "arrays")


def driver_fill(suite: Suite, r: CheckResult, d: Deadline) -> None:
    """No framework: the probe fills the quota through cuMemAlloc_v2 resolved
    with cuGetProcAddress_v2 (cudart's path). Runs on fakegpu too."""
    run_dir = suite.new_dir("standalone", "driver")
    baseline = (suite.nvml_memory() or {}).get("used")
    w = suite.probe("probe-alloc", ["alloc", "--step-mib", "64", "--hold"],
                    suite.tenant_env(run_dir, memory=QUOTA_TEXT))
    ready = w.wait_event("ready", d, 60)
    got = w.wait_event("allocated", d, 60)
    nvml = suite.process_memory(w.pid, baseline)
    import cushare_regions as regions
    ledger = regions.used_bytes(run_dir)
    r.details.update(ready=_clean(ready), allocated=_clean(got), nvml=nvml, ledger_used=ledger)
    w.send("release")
    freed = w.wait_event("freed", d, 30)
    w.stop()
    r.measure("cuMemGetInfo_v2 total", f"= {gib(QUOTA)}", gib(ready["mem_total"]),
              ready["mem_total"] == QUOTA)
    r.measure("cuDeviceTotalMem_v2", f"= {gib(QUOTA)}", gib(ready["device_total"]),
              ready["device_total"] == QUOTA)
    r.measure("refusal code", "CUDA_ERROR_OUT_OF_MEMORY", got.get("stop_error"),
              got.get("stop_error") == "CUDA_ERROR_OUT_OF_MEMORY")
    drop = ready["mem_free"] - got["mem_free_after"]
    r.measure("cuMemGetInfo_v2 free shrinks by what was allocated", gib(got["obtained"]),
              gib(drop), abs(drop - got["obtained"]) <= 2 * MiB)
    judge_memory(r, QUOTA, got["obtained"], nvml, "cuMemAlloc_v2")
    r.measure("ledger (usage region) while holding", f"<= {gib(QUOTA)}", gib(ledger),
              None if ledger is None else ledger <= QUOTA)
    r.measure("free memory back after cuMemFree", gib(ready["mem_free"]), gib(freed["mem_free"]),
              freed["mem_free"] >= ready["mem_free"] - 2 * MiB)


def shared_quota(suite: Suite, r: CheckResult, d: Deadline) -> None:
    """Check 4: two processes of one allocation fill it concurrently."""
    run_dir = suite.new_dir("standalone", "shared")
    baseline = (suite.nvml_memory() or {}).get("used")
    env = suite.tenant_env(run_dir, memory=QUOTA_TEXT)
    argv = ["alloc", "--step-mib", "64", "--pace-ms", "2", "--wait-go", "--hold"]
    ws = [suite.probe(f"probe-share{i}", argv, env) for i in (1, 2)]
    for w in ws:
        w.wait_event("ready", d, 60)
    for w in ws:
        w.send("go")
    got = [w.wait_event("allocated", d, 60) for w in ws]
    procs = suite.nvml_processes() or {}
    per_pid = [procs.get(w.pid) for w in ws]
    if suite.nvml is None:
        nvml_sum, source = None, "nvml unavailable: " + str(suite.nvml_error)
    elif any(v is None for v in per_pid):
        mem = suite.nvml_memory()
        nvml_sum = None if mem is None or baseline is None else mem["used"] - baseline
        source = "nvml device used minus baseline (pids not listed)"
    else:
        nvml_sum, source = sum(per_pid), "nvml per-process"
    import cushare_regions as regions
    ledger = regions.used_bytes(run_dir)
    slots = regions.active_slots(run_dir)
    r.details.update(allocated=[_clean(g) for g in got], nvml_per_process=per_pid,
                     ledger_used=ledger, slots=slots)
    for w in ws:
        w.send("release")
    for w in ws:
        w.wait_event("freed", d, 30)
        w.stop()
    total = sum(g["obtained"] for g in got)
    r.measure("both processes obtained memory", "each > 0",
              [gib(g["obtained"]) for g in got], all(g["obtained"] > 0 for g in got))
    r.measure("sum obtained by the two processes", f"<= {gib(QUOTA)}", gib(total), total <= QUOTA)
    judge_memory(r, QUOTA, total, {"bytes": nvml_sum, "source": source}, "both processes",
                 whose="both processes")
    r.measure("processes registered in the allocation's usage region", "2", len(slots),
              len(slots) == 2)


def _clean(msg):
    return {k: v for k, v in msg.items() if not k.startswith("_")}




def triton_kernels(suite: Suite, r: CheckResult, d: Deadline) -> None:
    """Check 2f: Triton kernels run under the shim and pass its launch gate."""
    import cushare_regions as regions
    fw = suite.framework("triton")
    torch = suite.framework("torch")
    if not fw.get("available") or not torch.get("available"):
        r.skip("triton unavailable: " + str(fw.get("reason") if not fw.get("available")
                                               else torch.get("reason")))
        return
    r.framework = f"triton {fw.get('version')}"
    run_dir = suite.new_dir("standalone", "triton")
    cache = suite.new_dir("scratch", "triton-cache")
    w = suite.py_worker("triton", "triton", "triton_kernels.py", [],
                        suite.tenant_env(run_dir, memory=QUOTA_TEXT,
                                         extra={"TRITON_CACHE_DIR": cache}))
    w.wait_event("ready", d, 180)
    before = regions.read(run_dir, "usage").get("gpus", 0, "launches")
    done = w.wait_event("done", d, 60)
    after = regions.read(run_dir, "usage").get("gpus", 0, "launches")
    w.stop()
    r.details["done"] = _clean(done)
    r.measure("Triton vector add computes correctly under the shim", "true", done.get("correct"),
              done.get("correct") is True)
    r.measure("launches counted by the gate during the Triton loop", f">= {done['launches']}",
              after - before, after - before >= done["launches"])
