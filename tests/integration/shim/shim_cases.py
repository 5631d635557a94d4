#!/usr/bin/python3
"""Integration cases for libcushare.so under fakegpu (ctest shim.*).

Each case runs real programs (samples/alloc_probe linked with -lcuda, and
tests/integration/shim/shim_probe, which reaches the driver through dlopen +
dlsym and cuGetProcAddress) with the shim preloaded, in a fresh temp folder
with its own FAKEGPU_STATE and CUSHARE_RUN_DIR, and checks what they report
against the quota, the `usage` region (the ledger, read with the test
toolkit's region reader, tests/lib/cushare_regions.py) and fakegpu's ground truth.

Usage: shim_cases.py <case> --lib ... --fakegpu-dir ... --samples-dir ... --probe ...
       --stat ... --interposer ... [--preload-prefix ...]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import cushare_regions as cr  # noqa: E402
import cushare_test as ct  # noqa: E402
import drain_marks  # noqa: E402
import cushare_timing as tm  # noqa: E402

GI = 1 << 30
MI = 1 << 20

class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


class Usage:
    """A snapshot of the allocation's `usage` region, read as it is (the first
    process may still be creating it: no magic or size check)."""

    def __init__(self, path):
        self.region = cr.Region.read(path, "usage", validate=False)

    def used(self, gpu=0):
        return self.region.get("gpus", gpu, "used_bytes")

    def oom_refusals(self, gpu=0):
        return self.region.get("gpus", gpu, "oom_refusals")

    def last_oom_request(self, gpu=0):
        return self.region.get("gpus", gpu, "last_oom_request_bytes")

    def slots(self):
        """Active slots: list of (pid, bytes[0], overhead[0])."""
        return [(s["pid"], s["bytes"][0], s["overhead"][0])
                for s in self.region.slots(states=(cr.SLOT_ACTIVE,))]


def limit_of(run_dir, gpu=0):
    return cr.read(run_dir, "limits", validate=False).get("gpus", gpu, "memory_limit_bytes")


class Harness:
    def __init__(self, args, tmp):
        self.a = args
        self.tmp = tmp
        self.run_dir = os.path.join(tmp, "run")
        self.base = dict(os.environ)
        for k in list(self.base):
            if k.startswith(("CUSHARE_", "CUDA_DEVICE_", "FAKEGPU_")):
                del self.base[k]
        self.base.update({
            "LD_LIBRARY_PATH": args.fakegpu_dir,
            "LD_PRELOAD": args.preload_prefix + args.lib,
            "FAKEGPU_STATE": os.path.join(tmp, "fakegpu.state"),
            "FAKEGPU_DEVICES": "H100:80Gi:132",
            "FAKEGPU_CONTEXT_OVERHEAD": "300Mi",
            "FAKEGPU_HOST_BACKING": "0",
            "CUSHARE_RUN_DIR": self.run_dir,
            "CUSHARE_LOG_LEVEL": "info",
        })

    def env(self, extra):
        e = dict(self.base)
        for k, v in (extra or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e

    def run(self, cmd, extra=None, expect_rc=0, timeout=30):
        p = subprocess.run(cmd, env=self.env(extra), capture_output=True, text=True,
                           timeout=timeout)
        if expect_rc is not None and p.returncode != expect_rc:
            raise Failure(f"{cmd} exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
        lines = [l for l in p.stdout.splitlines() if l.startswith(("{", "["))]
        out = json.loads(lines[-1]) if lines else None
        return out, p.stderr

    def probe(self, *args, extra=None, expect_rc=0):
        return self.run([self.a.probe, *args], extra, expect_rc)

    def memory_probe(self, *args, extra=None):
        """memory_path_probe under fakegpu's ground truth, sampled while it runs:
        (its JSON line, its stderr, the peak device memory used)."""
        with ct.Sampler(TruthNode(self)) as sampler:
            out, err = self.run([self.a.memory_probe, *args], extra, timeout=60)
        return out, err, sampler.peak

    def alloc_probe(self, *args, extra=None, expect_rc=0):
        return self.run([os.path.join(self.a.samples_dir, "alloc_probe"), *args], extra, expect_rc)

    def usage(self):
        return Usage(os.path.join(self.run_dir, "usage"))

    def usage_after_exit(self):
        """The usage region once the charges of the allocation's processes
        that are gone are returned. A process's memory stays charged through
        its exit, until somebody finds it gone: here cusharectl, which reads
        the regions (and returns such charges) when no daemon runs."""
        ctl = os.path.join(os.path.dirname(self.a.stat), "cusharectl")
        p = subprocess.run([ctl, "--run-dir", self.run_dir, "status"],
                           env=self.env({"LD_PRELOAD": None}), capture_output=True, text=True,
                           timeout=30)
        check(p.returncode == 0, f"cusharectl status: {p.stdout} {p.stderr}")
        return self.usage()

    def truth(self):
        return self.run_stat({})

    def run_stat(self, extra):
        e = dict(extra)
        e["LD_PRELOAD"] = None
        out = subprocess.run([self.a.stat, "--json"], env=self.env(e),
                             capture_output=True, text=True, timeout=30)
        check(out.returncode == 0, f"fakegpu-stat failed: {out.stderr}")
        return json.loads(out.stdout)


class TruthNode:
    """What cushare_test.Sampler reads: this harness's fakegpu ground truth."""

    def __init__(self, h):
        self.h = h

    def device(self, index=0):
        try:
            return self.h.truth()["devices"][index]
        except (Failure, ValueError, subprocess.SubprocessError) as e:
            raise ct.Failure(str(e))  # the state file may not exist yet

    def reset_peak(self):
        e = self.h.env({"LD_PRELOAD": None})
        subprocess.run([self.h.a.stat, "--reset-peak"], env=e, capture_output=True, timeout=30)


QUOTA = {"CUSHARE_MEMORY_LIMIT": "4Gi"}
OVERHEAD = 300 * MI


def check_fill(h, out, quota, step, what):
    """Common checks of a fill to out-of-memory against one quota."""
    check(out["result"] in ("CUDA_ERROR_OUT_OF_MEMORY",), f"{what}: result {out['result']}")
    used = out["bytes"] + OVERHEAD
    check(used <= quota, f"{what}: {out['bytes']} + overhead {OVERHEAD} > quota {quota}")
    check(quota - used < step, f"{what}: stopped {quota - used} bytes short of the quota (step {step})")


# --------------------------------------------------------------- cases ---

def case_alloc_probe_4gi(h):
    """-lcuda program (alloc_probe): at most 4Gi with overhead, within a step; exact views."""
    out, err = h.alloc_probe("--api", "alloc", "--step", "256Mi", extra=QUOTA)
    check_fill(h, out, 4 * GI, 256 * MI, "alloc_probe")
    check(out["before"]["total"] == 4 * GI, f"cuMemGetInfo total {out['before']['total']} != 4Gi")
    check(out["before"]["device_total"] == 4 * GI, "cuDeviceTotalMem_v2 != 4Gi")
    check(out["before"]["free"] == 4 * GI - OVERHEAD,
          f"free before {out['before']['free']} != 4Gi - context overhead")
    check(out["before"]["free"] - out["after"]["free"] == out["bytes"],
          "free did not shrink by exactly the bytes allocated")
    check("out of memory quota" in err and "requested 268435456 bytes" in err,
          f"OOM log line missing: {err}")
    u = h.usage_after_exit()
    check(u.used() == 0, f"ledger not back to 0 after exit: {u.used()}")
    check(u.oom_refusals() >= 1 and u.last_oom_request() == 256 * MI, "OOM not recorded in usage")
    check(limit_of(h.run_dir) == 4 * GI, "standalone limits file != 4Gi")


def make_api_case(api, step="256Mi"):
    def case(h):
        out, _ = h.alloc_probe("--api", api, "--step", step, extra=QUOTA)
        check(out["result"] == "CUDA_ERROR_OUT_OF_MEMORY", f"{api}: result {out['result']}")
        check(out["before"]["total"] == 4 * GI, f"{api}: total {out['before']['total']}")
        charged = out["before"]["free"] - out["after"]["free"]
        check(charged >= out["bytes"], f"{api}: charged {charged} < allocated {out['bytes']}")
        check(out["bytes"] + OVERHEAD <= 4 * GI, f"{api}: {out['bytes']} beyond the quota")
        check(out["after"]["free"] < 512 * MI, f"{api}: stopped early, free {out['after']['free']}")
        check((used := h.usage_after_exit().used()) == 0, f"{api}: ledger {used} after exit")
    case.__doc__ = f"alloc_probe --api {api}: charged, refused at the quota, view consistent"
    return case


def case_dlsym_path(h):
    """dlopen(libcuda.so.1) + dlsym(cuMemAlloc_v2): same quota, exact views."""
    out, _ = h.probe("--mode", "fill", "--resolve", "dlsym", extra=QUOTA)
    check_fill(h, out, 4 * GI, 256 * MI, "dlsym")
    check(out["total"] == 4 * GI and out["device_total"] == 4 * GI, "dlsym: totals")
    check(out["free_shrinks_exactly"], "dlsym: free did not shrink exactly per allocation")
    check(out["free_after_free"] == out["free_before"], "dlsym: frees did not return the quota")


def case_procaddr_paths(h):
    """cuGetProcAddress_v2 (flags 0 and 2) and cuGetProcAddress at several versions."""
    for how in ("procaddr", "procaddr4"):
        for version in ("11030", "12000", "12080", "13000"):
            for flags in ("0", "2"):
                what = f"{how} {version} flags {flags}"
                out, _ = h.probe("--mode", "fill", "--resolve", how, "--version", version,
                                 "--flags", flags, "--step", str(512 * MI), extra=QUOTA)
                check_fill(h, out, 4 * GI, 512 * MI, what)
                check(out["total"] == 4 * GI, f"{what}: total")
                check(out["free_shrinks_exactly"], f"{what}: free not exact")


def case_resolver(h):
    """Self-lookup, symbolStatus, unknown names, exact ABI and _ptsz selection."""
    h.probe("--mode", "resolver", extra=QUOTA)


LOOKUPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data",
                       "cudart13-proc-lookups.txt")


def case_proc_replay(h):
    """Every cuGetProcAddress request the CUDA 13 runtime makes (tests/data),
    through the shim and through the driver: hooked functions come back as the
    shim's wrapper of exactly the driver's ABI, the rest as the driver's own
    pointer, unknown names with the driver's answer."""
    out, _ = h.probe("--mode", "replay", "--lookups", LOOKUPS, extra=QUOTA)
    check(out["lookups"] == 443, f"{out['lookups']} lookups replayed, the file has 443")
    check(out["hooked"] > 50, f"only {out['hooked']} lookups came back hooked")
    print(f"  {out['lookups']} lookups: {out['hooked']} the shim's wrappers, "
          f"{out['driver']} the driver's own, {out['unknown']} unknown to the driver")


def case_dlsym_hook_neutral(h):
    """Non-CUDA dlsym (RTLD_DEFAULT, RTLD_NEXT, handles, misses) unchanged by the hook."""
    h.probe("--mode", "dlsym", extra=QUOTA)
    # RTLD_NEXT from a library loaded after the shim must mean "after that
    # library": the interposer's getppid() looks up the next getppid.
    extra = dict(QUOTA)
    extra["LD_PRELOAD"] = h.a.preload_prefix + h.a.lib + ":" + h.a.interposer
    out, err = h.run(["/bin/sh", "-c", "echo ok"], extra)
    check("interposer-recursion" not in err, f"RTLD_NEXT resolved relative to the shim: {err}")
    p = subprocess.run([sys.executable if False else "/usr/bin/python3", "-c",
                        "import os; os.getppid(); print('{\"ok\": 1}')"],
                       env=h.env(extra), capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and "ok" in p.stdout, f"interposer + shim: {p.returncode} {p.stderr}")


def case_two_processes_share(h):
    """Two processes of one allocation share one quota."""
    env = h.env(QUOTA)
    holder = subprocess.Popen([os.path.join(h.a.samples_dir, "alloc_probe"), "--max", "2Gi",
                               "--hold-seconds", "5"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(holder.stdout.readline())
        check(first["bytes"] == 2 * GI, f"holder got {first['bytes']}")
        out, _ = h.alloc_probe("--step", "256Mi", extra=QUOTA)
        check(out["bytes"] + 2 * GI + 2 * OVERHEAD <= 4 * GI,
              f"second process got {out['bytes']}: the two exceed the quota")
        check(4 * GI - (out["bytes"] + 2 * GI + 2 * OVERHEAD) < 256 * MI,
              f"second process stopped early at {out['bytes']}")
        check(out["before"]["free"] == 4 * GI - 2 * GI - 2 * OVERHEAD,
              f"second process sees free {out['before']['free']}")
    finally:
        holder.kill()
        holder.wait()


def case_creation_race(h):
    """Processes starting at once in an empty allocation folder: one creates the
    regions, the others wait for it to publish them; every one of them runs."""
    # Room for all twelve first contexts' reservations (each reserves the
    # architecture's default before any context of the allocation was measured).
    for rnd in range(40):
        run_dir = os.path.join(h.tmp, f"race{rnd}")
        extra = dict(CUSHARE_MEMORY_LIMIT="16Gi", CUSHARE_RUN_DIR=run_dir,
                     FAKEGPU_CONTEXT_OVERHEAD="64Mi")
        procs = [subprocess.Popen([os.path.join(h.a.samples_dir, "alloc_probe"), "--max", "64Mi"],
                                  env=h.env(extra), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(12)]
        for p in procs:
            out, err = p.communicate(timeout=30)
            check(p.returncode == 0, f"round {rnd}: a racing process failed ({p.returncode}): {err}")


def case_race_and_kill(h):
    """8 processes x 4 threads racing: never above the quota; kill -9 returns bytes."""
    quota = 8 * GI
    extra = {"CUSHARE_MEMORY_LIMIT": "8Gi", "FAKEGPU_CONTEXT_OVERHEAD": "64Mi",
             "CUSHARE_LOG_LEVEL": "off"}
    env = h.env(extra)
    # Every racer creates its context before the start: one still starting
    # after it (a sanitizer build on a loaded host) finds the quota full and
    # its context refused, as it should be.
    start_at = time.time() + (5.0 if tm.SANITIZED else 1.0)
    procs = [subprocess.Popen([h.a.probe, "--mode", "race", "--threads", "4", "--seconds", "2",
                               "--max-step", str(512 * MI), "--seed", str(i),
                               "--start-at", str(start_at)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(8)]
    peak_ledger = peak_truth = 0
    killed = []
    deadline = start_at + 1.5
    while time.time() < deadline:
        usage_path = os.path.join(h.run_dir, "usage")
        # The first process may still be creating (sizing) the file.
        if os.path.exists(usage_path) and os.path.getsize(usage_path) >= cr.offset("usage", "slots"):
            peak_ledger = max(peak_ledger, h.usage().used())
        truth = h.truth()
        peak_truth = max(peak_truth, truth["devices"][0]["memory_used"])
        if not killed and time.time() > deadline - 1.0:
            for p in procs[:3]:
                p.send_signal(signal.SIGKILL)
                killed.append(p)
        time.sleep(0.05)
    for p in procs:
        p.wait(timeout=30)
    for p in procs[3:]:
        check(p.returncode == 0, f"racer exited {p.returncode}: {p.stderr.read()}")
    check(peak_ledger <= quota, f"ledger peaked at {peak_ledger} > quota {quota}")
    check(peak_truth <= quota, f"fakegpu ground truth peaked at {peak_truth} > quota {quota}")
    # Killed processes' slots are reclaimed by the next process of the allocation.
    out, _ = h.alloc_probe("--max", "1Gi", extra=extra)
    u = h.usage_after_exit()
    check(u.used() == 0, f"ledger {u.used()} after every process ended (kill -9 bytes not returned)")
    check(not u.slots(), f"slots left active: {u.slots()}")


def case_kill_reclaim_live(h):
    """A process killed with -9: a live process of the allocation sees its bytes return
    (its memory queries reclaim dead slots, at most once a second) without a daemon."""
    env = h.env(QUOTA)
    # The watcher prints its view every 200 ms, lines queued in the pipe
    # whatever the test is waiting for: it lives until killed, and its lines
    # are read until the view expected, with a deadline.
    watcher = subprocess.Popen([h.a.probe, "--mode", "watch", "--seconds", "120"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    views = ct.LineReader(watcher.stdout)
    holder = None

    def watch_until(free, seconds, what):
        deadline = time.monotonic() + seconds
        seen = []
        while not seen or seen[-1] != free:
            line = views.line(deadline)
            if line is None:
                raise Failure(f"{what}: free went {seen}, not to {free} within {seconds} s "
                              f"(watcher exit status {watcher.poll()})")
            view = json.loads(line)
            if not seen or seen[-1] != view["free"]:
                seen.append(view["free"])

    try:
        line = views.line(time.monotonic() + 30)
        check(line is not None, f"the watcher printed no view (exit {watcher.poll()})")
        before = json.loads(line)["free"]
        holder = subprocess.Popen([os.path.join(h.a.samples_dir, "alloc_probe"), "--max", "1Gi",
                                   "--hold-seconds", "120"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        line = ct.LineReader(holder.stdout).line(time.monotonic() + 30)
        check(line is not None, f"the holder did not report its allocation (exit {holder.poll()})")
        json.loads(line)
        watch_until(before - (GI + OVERHEAD), 10, "watcher did not see the holder")
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        watch_until(before, 4, "killed holder's bytes not returned to the live watcher")
    finally:
        for p in (watcher, holder):
            if p:
                p.kill()
                p.wait()


def case_two_allocations_independent(h):
    """Two allocations with different quotas on one device are independent."""
    other = os.path.join(h.tmp, "run2")
    a, _ = h.alloc_probe("--step", "256Mi", extra={"CUSHARE_MEMORY_LIMIT": "2Gi"})
    b, _ = h.alloc_probe("--step", "256Mi",
                         extra={"CUSHARE_MEMORY_LIMIT": "3Gi", "CUSHARE_RUN_DIR": other})
    check_fill(h, a, 2 * GI, 256 * MI, "allocation A")
    check_fill(h, b, 3 * GI, 256 * MI, "allocation B")
    check(a["before"]["total"] == 2 * GI and b["before"]["total"] == 3 * GI, "totals")


BAD_ENV = [
    ("CUSHARE_MEMORY_LIMIT", "4GB"),
    ("CUSHARE_MEMORY_LIMIT", "-1Gi"),
    ("CUSHARE_MEMORY_LIMIT", ""),
    ("CUSHARE_MEMORY_LIMIT", "0"),
    ("CUSHARE_MEMORY_LIMIT", "150%"),
    ("CUSHARE_MEMORY_LIMIT_0", "lots"),
    ("CUDA_DEVICE_MEMORY_LIMIT", "4x"),
    ("CUSHARE_COMPUTE_LIMIT", "101"),
    ("CUSHARE_COMPUTE_MODE", "fast"),
    ("CUSHARE_DISABLE", "maybe"),
    ("CUSHARE_RUN_DIR", "relative/dir"),
]


def case_bad_env(h):
    """Each malformed variable: cuInit fails with CUDA_ERROR_INVALID_VALUE, naming it."""
    for name, value in BAD_ENV:
        extra = dict(QUOTA)
        extra[name] = value
        out, err = h.alloc_probe(extra=extra, expect_rc=1)
        check("cuInit failed: CUDA_ERROR_INVALID_VALUE" in err,
              f"{name}={value!r}: cuInit did not fail closed: {err}")
        check(name in err, f"{name}={value!r}: the error does not name the variable: {err}")
    check(h.truth()["devices"][0]["memory_used"] == 0, "memory was allocated despite bad configuration")


def case_bad_regions(h):
    """Corrupt, foreign, truncated regions and an unusable run dir: fail closed."""
    os.makedirs(h.run_dir, exist_ok=True)
    limits = os.path.join(h.run_dir, "limits")
    cases = {
        "garbage": b"\x00garbage" * 512,
        "foreign": b"CUSHUSAG" + b"\x01" * 4088,  # a usage header where limits belong
        "empty": b"",
    }
    for what, data in cases.items():
        with open(limits, "wb") as f:
            f.write(data)
        out, err = h.alloc_probe(extra=QUOTA, expect_rc=1)
        check("cuInit failed: CUDA_ERROR_INVALID_VALUE" in err, f"{what} limits: {err}")
        check(limits in err, f"{what} limits: the error does not name the file: {err}")
    os.remove(limits)
    # A valid limits file with a corrupt usage file.
    h.alloc_probe("--max", "256Mi", extra=QUOTA)
    with open(os.path.join(h.run_dir, "usage"), "r+b") as f:
        f.write(b"\xff" * 8)
    out, err = h.alloc_probe(extra=QUOTA, expect_rc=1)
    check("cuInit failed: CUDA_ERROR_INVALID_VALUE" in err and "usage" in err, f"corrupt usage: {err}")
    # A run dir that cannot be created (a path below a regular file).
    blocker = os.path.join(h.tmp, "file")
    open(blocker, "w").close()
    out, err = h.alloc_probe(extra={"CUSHARE_MEMORY_LIMIT": "4Gi",
                                    "CUSHARE_RUN_DIR": os.path.join(blocker, "run")},
                             expect_rc=1)
    check("cuInit failed: CUDA_ERROR_INVALID_VALUE" in err and "run dir" in err,
          f"unusable run dir: {err}")
    check(h.truth()["devices"][0]["memory_used"] == 0, "memory was allocated despite bad regions")


def case_env_cannot_raise(h):
    """An existing limits file is authoritative: the environment cannot raise it."""
    h.alloc_probe("--max", "256Mi", extra={"CUSHARE_MEMORY_LIMIT": "2Gi"})
    out, err = h.alloc_probe("--step", "256Mi", extra={"CUSHARE_MEMORY_LIMIT": "8Gi"})
    check(out["before"]["total"] == 2 * GI, f"total {out['before']['total']} != 2Gi")
    check_fill(h, out, 2 * GI, 256 * MI, "raised env")
    check("the region wins" in err, f"no disagreement warning: {err}")
    # HAMi aliases alone configure a fresh allocation.
    other = os.path.join(h.tmp, "hami")
    out, _ = h.alloc_probe("--step", "256Mi", extra={"CUDA_DEVICE_MEMORY_LIMIT": "3g",
                                                     "CUSHARE_RUN_DIR": other})
    check(out["before"]["total"] == 3 * GI, "HAMi alias CUDA_DEVICE_MEMORY_LIMIT=3g not applied")


def case_disable(h):
    """CUSHARE_DISABLE=1: pure pass-through (no regions, the real device)."""
    out, _ = h.alloc_probe("--step", "1Gi", "--max", "6Gi",
                           extra={"CUSHARE_MEMORY_LIMIT": "4Gi", "CUSHARE_DISABLE": "1"})
    check(out["bytes"] == 6 * GI, f"disabled shim still limited: {out['bytes']}")
    check(out["before"]["total"] == 80 * GI, "disabled shim still virtualises the total")
    check(not os.path.exists(os.path.join(h.run_dir, "limits")), "disabled shim created regions")


def case_fork(h):
    """fork: children of an uninitialised parent get their own slots; children of an
    initialised parent leave its slot alone when they exit."""
    out, _ = h.probe("--mode", "fork", "--step", str(512 * MI), "--children", "3", extra=QUOTA)
    check(out["free_before"] == 4 * GI - OVERHEAD - 512 * MI,
          f"parent sees free {out['free_before']}: earlier children's bytes not returned")
    check(out["free_after"] == out["free_before"],
          f"parent view changed across children: {out['free_before']} -> {out['free_after']}")
    check((used := h.usage_after_exit().used()) == 0, f"ledger {used} after all exited")


def case_threads(h):
    """Many threads of one process: the ledger returns to zero."""
    out, _ = h.probe("--mode", "race", "--threads", "16", "--seconds", "1",
                     "--max-step", str(256 * MI), extra=QUOTA)
    check(out["allocs"] > 0, "no allocation succeeded")
    check((used := h.usage_after_exit().used()) == 0, f"ledger {used} after exit")


def case_stream_churn(h):
    """Threads launching round the streams of their own, each stream destroyed
    with its work still queued after a few launches and made anew: the gate's
    batch records cover the batch's streams and never name a destroyed one
    (fakegpu aborts the process on one here), and every launch is counted."""
    worker = os.path.join(h.a.samples_dir, "spin_worker")
    out, err = h.run([worker, "--seconds", "2", "--kernel-us", "20", "--threads", "4",
                      "--streams", "3", "--churn-streams", "7"],
                     extra={"FAKEGPU_FREED_HANDLES": "abort", "CUSHARE_COMPUTE_MODE": "burst"},
                     timeout=60)
    check(out["errors"] == 0, f"spin_worker: {out} {err}")
    check(out["launches"] > 1000, f"only {out['launches']} launches in 2 s")
    counted = cr.Region.read(os.path.join(h.run_dir, "usage"), "usage").get("gpus", 0, "launches")
    check(counted == out["launches"], f"the gate counted {counted} launches of {out['launches']}")


def case_context_end(h):
    """Contexts that end under queued work, destroyed, reset or released (and
    primary releases that leave a reference, several threads' at once): the gate forgets their events
    and streams once the driver destroyed them, waits on none of them while
    it does (fakegpu aborts the process on a destroyed handle here), counts
    every launch, and goes on in the next context."""
    # The reset rounds run capped without a daemon: the gate's local duty
    # cycle probes each spell's start on a stream of its own in the context.
    runs = [(["--how", "destroy"], {"CUSHARE_COMPUTE_MODE": "burst"}),
            (["--how", "reset"], {"CUSHARE_COMPUTE_MODE": "capped", "CUSHARE_COMPUTE_LIMIT": "90"}),
            (["--how", "release"], {"CUSHARE_COMPUTE_MODE": "burst"}),
            (["--how", "release", "--extra-reference"], {"CUSHARE_COMPUTE_MODE": "burst"}),
            # Three threads' releases of one primary context at once, each
            # with a reference it gives back halfway: ends that overlap.
            (["--how", "release", "--threads", "3", "--extra-reference"],
             {"CUSHARE_COMPUTE_MODE": "burst"})]
    for i, (args, mode) in enumerate(runs):
        how = " ".join(args[1:])
        out, err, counted = run_in_own_folder(
            h, f"way{i}", [h.a.end_probe, *args, "--seconds", "1.5"],
            {"FAKEGPU_FREED_HANDLES": "abort", **mode}, timeout=60)
        check(out["errors"] == 0, f"{how}: {out} {err}")
        check(out["rounds"] >= 20, f"{how}: only {out['rounds']} contexts in 1.5 s")
        check(counted == out["launches"], f"{how}: the gate counted {counted} launches of "
                                          f"{out['launches']}")
        if args[1] == "reset":  # documented as safe; fakegpu answers CUDA_SUCCESS
            after_reset = out["release_after_reset"]
            check(after_reset["errors"] == 0, f"{how}: the release after the reset: {after_reset}")


def run_in_own_folder(h, name, cmd, mode, **kw):
    """`cmd` under the shim in an allocation folder of its own, made from
    `mode` (the environment sets a standalone allocation's limits only when
    it makes them): (its JSON line, its stderr, the launches the gate
    counted there)."""
    folder = os.path.join(h.tmp, name)
    out, err = h.run(cmd, extra={**mode, "CUSHARE_RUN_DIR": folder}, **kw)
    limits = cr.Region.read(os.path.join(folder, "limits"), "limits")
    want = {"burst": 0, "capped": 1}[mode["CUSHARE_COMPUTE_MODE"]]
    check(limits.get("gpus", 0, "mode") == want, f"{name}: the allocation is not {mode}")
    counted = cr.Region.read(os.path.join(folder, "usage"), "usage").get("gpus", 0, "launches")
    return out, err, counted


def case_capture_neighbour(h):
    """A global-mode capture in one thread while another thread's launches
    are held by the gate: the driver prohibits synchronisations and queries
    from a thread in the default interaction mode then, and invalidates the
    capture (fakegpu models the rule), so the gate's own waits and queries
    there go in the relaxed mode. The capture ends and its graph runs, and
    every launch is counted (the graph's as one, the captured ones not)."""
    for name, mode in (("burst", {"CUSHARE_COMPUTE_MODE": "burst"}),
                       ("capped50", {"CUSHARE_COMPUTE_MODE": "capped",
                                     "CUSHARE_COMPUTE_LIMIT": "50"})):
        out, err, counted = run_in_own_folder(h, name, [h.a.capture_probe], mode, timeout=60)
        check(out["end_capture"] == "CUDA_SUCCESS", f"{name}: the capture ended with "
                                                    f"{out['end_capture']}: {err}")
        check(out["graph_launch"] == "CUDA_SUCCESS", f"{name}: graph launch {out['graph_launch']}")
        check(counted == out["launches"], f"{name}: the gate counted {counted} launches of "
                                          f"{out['launches']}")


def drain_never_early(name, out, samples, err):
    """No drain mark sampled before the long kernel could have ended may
    reach its submission."""
    early = drain_marks.early_marks(out, samples)
    check(len(samples) > 100, f"{name}: {len(samples)} samples of the drain mark")
    check(not early, f"{name}: the drain mark passed the long kernel's submission "
                     f"{(early[0][0] - out['long_after_ns']) / 1e6:.1f} ms after it, "
                     f"{(out['long_before_ns'] + out['long_us'] * 1000 - early[0][0]) / 1e6:.1f} "
                     f"ms before it could end ({len(early)} of {len(samples)} samples): {err}"
          if early else "")


def case_stream_cover(h):
    """A long kernel on one stream, then short ones synchronised on another,
    then a wait for the long one: the GPU runs them side by side (fakegpu
    too), and the short ones end first.
    - The gate must not publish the long kernel's work as drained (a drain
      mark at or past its submission) before it can have ended: the
      scheduler would hand the GPU on while it runs. Two short kernels,
      streams of each kind, burst and capped. A batch's record on the last
      launch's stream alone fails it.
    - Nor hold the short ones until the long one ends (the oldest batch
      covers both streams, and its long run would read as a long queue): 200
      short kernels beside a 2 s one must all be done while it runs. Without
      the gate's look at the launching stream they waited the 2 s out.
    - Nor keep them to one in flight at a time: 5000 kernels of 20 us (0.1 s
      of work), synchronised only at the end, must be done while a 1 s one
      runs (3 s in a sanitizer build). Let go only while their stream was idle, they took 1.1-1.5 s
      (about 0.3 ms each); with their own queue up to the horizon, 0.2 s
      (0.4 s capped at 50).
    - Nor hold the legacy stream's beside a non-blocking stream's long
      kernel (the legacy stream does not wait for non-blocking streams): 200
      beside a 2 s one. They waited it out before.
    - Nor a per-thread stream's beside a blocking stream's long kernel (the
      per-thread stream waits for the legacy stream only): 200 beside a 2 s
      one, one thread launching on its per-thread stream. Recorded on the
      legacy stream, the gate's events put the long kernel ahead of them.
    - Nor hold them where the long kernel's process launched nothing for a
      while after it (5 ms): the gate's poller records it in a batch of its
      own, on its stream alone, and the short ones on another stream run
      beside it all the same (a non-blocking stream beside a non-blocking
      one or the legacy stream, the legacy stream beside a non-blocking one).
      Before, the beside rule applied only behind a batch over several
      streams, and they waited the 2 s out."""
    variants = (("non-blocking", "non-blocking"), ("non-blocking", "legacy"),
                ("legacy", "non-blocking"), ("blocking", "non-blocking"),
                ("non-blocking", "per-thread"), ("blocking", "per-thread"))
    modes = (("burst", {"CUSHARE_COMPUTE_MODE": "burst"}),
             ("capped50", {"CUSHARE_COMPUTE_MODE": "capped", "CUSHARE_COMPUTE_LIMIT": "50"}))
    for long_stream, short_stream in variants:
        for mode_name, mode in modes:
            name = f"{mode_name}-{long_stream}-{short_stream}"
            cmd = [h.a.cover_probe, "--long-us", "400000", "--long-stream", long_stream,
                   "--short-stream", short_stream]
            with drain_marks.DrainSampler(os.path.join(h.tmp, name)) as sampler:
                out, err, _ = run_in_own_folder(h, name, cmd, mode, timeout=60)
            check(out["long_pending_after_short"],
                  f"{name}: the long kernel ended before the short ones: this proves nothing")
            drain_never_early(name, out, sampler.samples, err)
    beside = (("beside", ["--long-us", "2000000", "--short-launches", "200", "--sync-every", "8"],
               "200 short kernels beside a 2 s one", "held until it ended"),
              # 5000 launches through the gate's slow path: a sanitizer build
              # gets a longer long kernel (its launches, not the GPU, slow down).
              ("deep", ["--long-us", "3000000" if tm.SANITIZED else "1000000", "--short-us",
                        "20", "--short-launches", "5000", "--sync-every", "5000"],
               "5000 kernels of 20 us beside a long one", "kept to one in flight at a time"),
              ("legacy", ["--long-us", "2000000", "--short-launches", "200", "--sync-every", "8",
                          "--short-stream", "legacy"],
               "200 short kernels on the legacy stream beside a 2 s one on a non-blocking "
               "stream", "held until it ended"),
              ("per-thread", ["--long-us", "2000000", "--short-launches", "200", "--sync-every",
                              "8", "--short-stream", "per-thread", "--long-stream", "blocking"],
               "200 short kernels on a per-thread stream beside a 2 s one on a blocking stream",
               "held until it ended"),
              ("paused", ["--long-us", "2000000", "--short-launches", "200", "--sync-every",
                          "8", "--pause-us", "5000", "--warmup-on", "long"],
               "200 short kernels beside a 2 s one launched 5 ms before them",
               "held until it ended"),
              ("paused-legacy", ["--long-us", "2000000", "--short-launches", "200",
                                 "--sync-every", "8", "--pause-us", "5000", "--warmup-on",
                                 "long", "--short-stream", "legacy"],
               "200 short kernels on the legacy stream beside a 2 s one on a non-blocking "
               "stream launched 5 ms before them", "held until it ended"),
              ("paused-from-legacy", ["--long-us", "2000000", "--short-launches", "200",
                                      "--sync-every", "8", "--pause-us", "5000", "--warmup-on",
                                      "long", "--long-stream", "legacy"],
               "200 short kernels on a non-blocking stream beside a 2 s one on the legacy "
               "stream launched 5 ms before them", "held until it ended"))
    for mode_name, mode in modes:
        for variant, args, what, why in beside:
            name = f"{mode_name}-{variant}"
            with drain_marks.DrainSampler(os.path.join(h.tmp, name)) as sampler:
                out, err, _ = run_in_own_folder(h, name, [h.a.cover_probe] + args, mode,
                                                timeout=60)
            check(out["long_pending_after_short"],
                  f"{name}: {what} took {out['short_phase_ns'] / 1e6:.0f} ms: {why}")
            drain_never_early(name, out, sampler.samples, err)


def case_oom_backtrace(h):
    """CUSHARE_OOM_BACKTRACE=1 adds the call site to the OOM line."""
    extra = dict(QUOTA)
    extra["CUSHARE_OOM_BACKTRACE"] = "1"
    _, err = h.alloc_probe("--step", "1Gi", extra=extra)
    # The innermost frame shown is the program's own (the shim's frames are
    # left out): the probe's executable, as module+offset.
    site = err.split("call site: ", 1)[1] if "call site: " in err else ""
    check(site.startswith("alloc_probe+0x"), f"call site does not start in the caller: {err}")
    check("libc.so.6" in site, f"call site does not reach libc's start-up: {err}")


def case_nvml(h):
    """NVML memory info shows the quota view; the process list only this allocation."""
    out, _ = h.probe("--mode", "nvml", extra=QUOTA)
    check(out["total"] == 4 * GI, f"nvml total {out['total']}")
    check(out["free"] == 4 * GI - OVERHEAD - 512 * MI, f"nvml free {out['free']}")
    check(out["used"] == OVERHEAD + 512 * MI, f"nvml used {out['used']}")
    check(out["pids"] == [out["self"]], f"process list {out['pids']} != [self]")


# An NVML-only program (what nvidia-smi is): ctypes under the preloaded shim,
# so the symbols come through the shim's dlsym hook. Prints, per NVML device,
# [status, total] of nvmlDeviceGetMemoryInfo.
NVML_ONLY = r"""
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
class Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]
assert lib.nvmlInit_v2() == 0
n = ctypes.c_uint()
assert lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
out = []
for i in range(n.value):
    d = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(d)) == 0
    m = Mem()
    rc = lib.nvmlDeviceGetMemoryInfo(d, ctypes.byref(m))
    out.append([rc, m.total, m.free + m.used])
print(json.dumps(out))
"""


def case_nvml_first(h):
    """NVML before (or without) any CUDA call, as nvidia-smi does: the quota view
    from the first query, the regions created as cuInit would create them."""
    def nvml_only(extra, expect_rc=0):
        return h.run(["/usr/bin/python3", "-c", NVML_ONLY], extra, expect_rc)

    # A fresh standalone allocation: the first NVML query creates the regions.
    out, _ = nvml_only(QUOTA)
    check(out == [[0, 4 * GI, 4 * GI]], f"nvml-only, fresh run dir: {out}")
    check(limit_of(h.run_dir) == 4 * GI, "the limits region created by the NVML query")
    probe, _ = h.alloc_probe("--step", "256Mi", extra=QUOTA)  # then CUDA, same allocation
    check_fill(h, probe, 4 * GI, 256 * MI, "CUDA after an NVML-only process")

    # Quotas keyed by CUDA ordinal follow CUDA_VISIBLE_DEVICES, not NVML's order.
    two = {"FAKEGPU_DEVICES": "A100:40Gi:108;H100:80Gi:132", "CUDA_VISIBLE_DEVICES": "1",
           "CUSHARE_MEMORY_LIMIT_0": "2Gi", "CUSHARE_RUN_DIR": os.path.join(h.tmp, "two"),
           "FAKEGPU_STATE": os.path.join(h.tmp, "two.state")}
    out, _ = nvml_only(two)
    check(out == [[0, 40 * GI, 40 * GI], [0, 2 * GI, 2 * GI]],
          f"CUDA_VISIBLE_DEVICES=1 with CUSHARE_MEMORY_LIMIT_0=2Gi: {out}")

    # A malformed quota: memory queries fail (and say why); nothing is created.
    bad_dir = os.path.join(h.tmp, "bad")
    out, err = nvml_only({"CUSHARE_MEMORY_LIMIT": "4Gx", "CUSHARE_RUN_DIR": bad_dir})
    check(out == [[999, 0, 0]], f"malformed quota: {out}")
    check("CUSHARE_MEMORY_LIMIT" in err, f"the log names the variable: {err}")
    check(not os.path.exists(os.path.join(bad_dir, "limits")), "no region for a bad quota")

    # A node run dir (the daemon's) is no allocation: NVML shows the card, CUDA
    # refuses to start, and no region is created there.
    node = os.path.join(h.tmp, "node")
    os.makedirs(os.path.join(node, "alloc"))
    out, err = nvml_only({"CUSHARE_RUN_DIR": node})
    check(out == [[0, 80 * GI, 80 * GI]], f"node run dir, NVML: {out}")
    out, err = h.alloc_probe("--max", "64Mi", extra={"CUSHARE_RUN_DIR": node}, expect_rc=None)
    check("node run dir" in err, f"node run dir, CUDA: {err}")
    check(not os.path.exists(os.path.join(node, "limits")), "no region in a node run dir")

    # Disabled: the real figures.
    out, _ = nvml_only({"CUSHARE_DISABLE": "1", "CUSHARE_RUN_DIR": os.path.join(h.tmp, "off")})
    check(out == [[0, 80 * GI, 80 * GI]], f"CUSHARE_DISABLE=1: {out}")


FAILED_LAUNCH = r"""
import ctypes, struct, sys, time, os
cu = ctypes.CDLL("libcuda.so.1")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cu.cuInit(0) == 0
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
# An invalid function: the launch passes the gate, then the driver refuses it.
rc = cu.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None)
time.sleep(0.2)
with open(os.path.join(os.environ["CUSHARE_RUN_DIR"], "usage"), "rb") as f:
    busy = struct.unpack_from("<I", f.read(BUSY_AT + 4), BUSY_AT)[0]
print("[%d, %d]" % (rc, busy))
"""


def case_failed_launch(h):
    """A launch the driver refuses queues nothing: the process must not stay
    counted among the allocation's busy processes (the daemon would never see
    the allocation drained, and every hand-off would wait for the drain bound)."""
    script = FAILED_LAUNCH.replace("BUSY_AT", str(cr.offset("usage", "gpus", 0, "busy_processes")))
    out, _ = h.run(["/usr/bin/python3", "-c", script], {"CUSHARE_COMPUTE_MODE": "burst"})
    check(out[0] != 0, f"the invalid launch fails: {out}")
    check(out[1] == 0, f"busy processes after a failed launch: {out}")


def read_demand(h):
    return cr.read(h.run_dir, "usage", validate=False).get("gpus", 0, "demand")


def case_gate_demand(h):
    """Threads held at the launch gate (here: for their queued 20 ms kernels
    to drain, with no daemon) count as the allocation's demand, once per
    process however many threads wait, and a process killed while waiting
    leaves none behind once its slot is reclaimed. Without the first, the
    daemon took a lease back as idle while a thread slept at the gate; without
    the last, a killed waiter kept its allocation demanding (and leased)
    forever."""
    worker = os.path.join(h.a.samples_dir, "spin_worker")
    p = subprocess.Popen([worker, "--seconds", "30", "--kernel-us", "20000", "--threads", "3"],
                         env=h.env({"CUSHARE_COMPUTE_MODE": "burst"}),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # The window opens once a thread first waits at the gate: before, the
        # worker is still making its context (a slow start is no defect).
        early = []
        deadline = time.monotonic() + 10
        while not any(early):
            if p.poll() is not None:
                raise Failure(f"spin_worker exited early: {p.stderr.read()}")
            check(time.monotonic() < deadline,
                  f"no thread waiting at the gate counted as demand within 10 s "
                  f"({len(early)} samples of a published region, all 0)")
            try:
                # The shim creates the region in place and publishes its magic
                # last: a file that exists may not be a region yet.
                early.append(cr.read(h.run_dir, "usage").get("gpus", 0, "demand"))
            except cr.RegionError:
                pass
            time.sleep(0.01)
        samples = []
        for _ in range(60):
            samples.append(cr.read(h.run_dir, "usage").get("gpus", 0, "demand"))
            time.sleep(0.01)
        if p.poll() is not None:
            raise Failure(f"spin_worker exited early: {p.stderr.read()}")
        check(max(early + samples) <= 1,
              f"demand counts the process once, not per thread: {early + samples}")
        waiting = sum(1 for d in samples[-40:] if d == 1)
        check(waiting >= 30, f"threads waiting at the gate count as demand: {samples}")
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    check(read_demand(h) == 1, "the killed waiter's mark stays until its slot is reclaimed")
    h.alloc_probe("--max", "0")  # a new process of the allocation reclaims dead slots
    check(read_demand(h) == 0, f"demand after reclaiming the killed waiter: {read_demand(h)}")


def check_graph_memory(h, *flags):
    with ct.Sampler(TruthNode(h)) as sampler:
        out, err = h.probe("--mode", "graph", *flags, "--step", str(2 * GI), "--max", str(2 * GI),
                           extra=QUOTA)
    check(sampler.peak <= 4 * GI,
          f"fakegpu ground truth peaked at {sampler.peak} bytes > the 4Gi quota")
    check(out["first"] == "CUDA_ERROR_OUT_OF_MEMORY",
          f"graph launch over the quota: {out['first']} (300Mi + 2Gi held + 2Gi graph > 4Gi)")
    check("graph" in err.lower(), f"the refusal is logged: {err}")
    check(out["free_after_first"] == out["free_before"] - 2 * GI,
          f"a refused launch charges nothing: {out}")
    check(out["second"] == "CUDA_SUCCESS", f"graph launch after freeing: {out['second']}")
    # The graph pool keeps its memory after the launch (until trimmed): charged.
    check(out["free_after_second"] <= out["free_before"] - 2 * GI,
          f"the graph pool is charged: {out}")
    check(h.usage_after_exit().used() == 0, "ledger back to zero at exit")


def case_graph_memory(h):
    """A captured graph's memory is reserved before cuGraphLaunch: refused over the
    quota (the 80Gi device itself would have run it), launched once memory is freed."""
    check_graph_memory(h)


def case_graph_memory_per_thread(h):
    """The same with the _ptsz calls on the NULL stream, as a program built for per-thread
    default streams captures: that stream can be captured (the legacy one cannot), and its
    graph's memory is reserved before the launch all the same."""
    check_graph_memory(h, "--per-thread")


def case_graph_memory_joined(h):
    """The allocation made on a stream that joined the capture (it waited on an
    event recorded in the capturing stream, a fork and a join as side streams
    make): the graph's memory is reserved before the launch all the same (it
    was left out: the launch ran past the quota)."""
    check_graph_memory(h, "--graph-via", "joined")


def case_graph_memory_nodes(h):
    """Graphs built node by node: an allocation node added by
    cuGraphAddMemAllocNode, by cuGraphAddNode_v2 (12.3) and by cuGraphAddNode
    (12.2) is reserved before the launch, as a captured one (the two
    cuGraphAddNode ABIs were not hooked: the launch ran past the quota)."""
    for how in ("alloc-node", "add-node", "add-node-12020"):
        check_graph_memory(h, "--graph-via", how)


def case_path_mipmap(h):
    """Mipmapped arrays: charged (driver's requirement), refused at the quota, returned."""
    out, _ = h.probe("--mode", "mipmap", extra=QUOTA)
    check(out["result"] == "CUDA_ERROR_OUT_OF_MEMORY", f"mipmap: result {out['result']}")
    charged = out["free_before"] - out["free_full"]
    check(out["arrays"] >= 1 and charged >= out["arrays"] * GI,
          f"mipmap: {out['arrays']} arrays charged only {charged}")
    check(out["free_after_free"] == out["free_before"], "mipmap: destroy did not return the quota")
    check(h.usage_after_exit().used() == 0, "mipmap: ledger not back to zero")


def case_visible_devices(h):
    """CUDA_VISIBLE_DEVICES by index, UUID, prefix and reordering: quotas follow the UUID."""
    two = {"FAKEGPU_DEVICES": "A100:40Gi:108;H100:80Gi:132"}
    uuids = [d["uuid"] for d in h.run_stat(two)["devices"]]
    check(len(uuids) == 2, f"fakegpu devices: {uuids}")
    # The first process sees both GPUs and writes per-UUID quotas.
    first = dict(two)
    first.update({f"CUSHARE_MEMORY_LIMIT_{uuids[0]}": "6Gi", f"CUSHARE_MEMORY_LIMIT_{uuids[1]}": "2Gi"})
    h.alloc_probe("--max", "256Mi", extra=first)
    for visible in ("1", uuids[1], uuids[1][:8], f"1,0"):
        extra = dict(two)
        extra["CUDA_VISIBLE_DEVICES"] = visible
        out, _ = h.alloc_probe("--step", "256Mi", extra=extra)
        check(out["before"]["total"] == 2 * GI,
              f"CUDA_VISIBLE_DEVICES={visible}: ordinal 0 total {out['before']['total']} != 2Gi")
        check_fill(h, out, 2 * GI, 256 * MI, f"CUDA_VISIBLE_DEVICES={visible}")
    extra = dict(two)
    extra["CUDA_VISIBLE_DEVICES"] = "1,0"
    out, _ = h.alloc_probe("--device", "1", "--step", "1Gi", "--max", "1Gi", extra=extra)
    check(out["before"]["total"] == 6 * GI, f"reordered ordinal 1 total {out['before']['total']}")


# Memory the driver keeps after the call that looks like its end: each
# attack runs under a 1Gi quota on an 80Gi device, so only the shim stops it.
QUOTA_1G = {"CUSHARE_MEMORY_LIMIT": "1Gi"}
MAX_POOLS = 256  # shim/accounting/pool_table.hpp


def check_peak(h, peak, what):
    check(peak <= GI, f"{what}: fakegpu ground truth peaked at {peak} bytes > quota {GI}")
    check((used := h.usage_after_exit().used()) == 0, f"{what}: ledger {used} after exit")


def case_path_pool_many(h):
    """300 pools that keep everything they allocate: pools past the record table
    are refused at creation, an untracked default pool at its first allocation;
    the tracked ones never take the device past the quota."""
    out, err, peak = h.memory_probe("--mode", "pools", "--count", "300", "--bytes", str(64 * MI),
                                    extra=QUOTA_1G)
    check_peak(h, peak, "300 pools")
    check(out["create"] == {"CUDA_SUCCESS": MAX_POOLS, "CUDA_ERROR_OUT_OF_MEMORY": 300 - MAX_POOLS},
          f"pool creation past the table: {out['create']}")
    check("memory pools" in err and "cuMemPoolCreate" in err, f"the refusal is logged: {err}")
    check(out["default_pool"] == "CUDA_ERROR_OUT_OF_MEMORY",
          f"default pool first used with the table full: {out['default_pool']}")
    # Under quota pressure the shim trims the pools (what they cache goes back),
    # so every pool may get its turn; none may take the device past the quota.
    check(out["fill"].get("CUDA_SUCCESS", 0) >= 1 and
          set(out["fill"]) <= {"CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"},
          f"filling the pools: {out['fill']}")
    check(out["free_after_destroy"] - out["free_full"] >= 64 * MI,
          f"destroying the pools returned their memory: {out}")
    check(out["default_pool_after_destroy"] == "CUDA_SUCCESS",
          f"default pool once the table has room: {out['default_pool_after_destroy']}")


def case_path_pool_destroyed_live(h):
    """A pool destroyed while an allocation from it lives keeps its memory until
    that allocation is freed: it stays charged until then."""
    out, _, peak = h.memory_probe("--mode", "pool_destroy", "--bytes", str(256 * MI),
                                  extra=QUOTA_1G)
    check_peak(h, peak, "destroyed pool")
    check(out["free_destroyed"] <= out["free_before"] - 256 * MI,
          f"the destroyed pool's memory is still charged: {out}")
    check(out["result"] == "CUDA_ERROR_OUT_OF_MEMORY", f"the fill is refused: {out['result']}")
    check(out["free_after"] == out["free_before"], f"returned with the last allocation: {out}")


def case_path_vmm_mapped_release(h):
    """cuMemRelease before cuMemUnmap, with one, two adjacent (one cuMemUnmap for
    both) and two separate mappings per handle, and a retained handle: charged
    until released and unmapped."""
    step = 128 * MI
    for args in (["--pieces", "1"], ["--pieces", "2"], ["--twice"]):
        what = f"vmm {' '.join(args)}"
        out, _, peak = h.memory_probe("--mode", "vmm", "--bytes", str(step), *args,
                                      extra=QUOTA_1G)
        check_peak(h, peak, what)
        check(out["result"] == "CUDA_ERROR_OUT_OF_MEMORY" and out["handles"] >= 1,
              f"{what}: released-but-mapped handles fill the quota: {out}")
        check(out["free_before"] - out["free_full"] >= out["handles"] * step,
              f"{what}: still charged after cuMemRelease: {out}")
        check(out["free_partly_unmapped"] == out["free_full"],
              f"{what}: charged while one mapping is left: {out}")
        check(out["free_unmapped"] == out["free_before"], f"{what}: returned at the last unmap: {out}")
        check(out["same_handle_retained"], f"{what}: cuMemRetainAllocationHandle: another handle")
        check(out["free_retained"] == out["free_before"] - step,
              f"{what}: a retained reference keeps it charged: {out}")
        check(out["free_end"] == out["free_before"], f"{what}: returned at the last release: {out}")


def case_path_graph_legacy(h):
    """A graph with a memory node instantiated through the legacy ABIs
    (cuGraphInstantiate at cudaVersion 10000 and 11000), launched over the quota
    again and again: every launch refused before it runs; it runs once it fits."""
    out, err, peak = h.memory_probe("--mode", "graph_legacy", "--bytes", str(512 * MI),
                                    "--hold", str(512 * MI), "--launches", "10", extra=QUOTA_1G)
    check_peak(h, peak, "legacy graph instantiation")
    for version in ("10000", "11000"):
        got = out[version]
        check(got["over_quota"] == {"CUDA_ERROR_OUT_OF_MEMORY": 10},
              f"cuGraphInstantiate@{version}: launches over the quota: {got['over_quota']}")
        check(got["fits"] == "CUDA_SUCCESS", f"cuGraphInstantiate@{version}: launch that fits")
    check("graph memory" in err, f"the refusal is logged: {err}")


def case_vmm_share_fd(h):
    """A VMM allocation exported by a process of one allocation (quota 1Gi)
    and imported through a file descriptor by a process of another: the device
    is charged once, the importer's ledger not at all, the bytes are shared,
    the memory outlives the exporter's release and returns after both; the
    importer's kernels pass its own allocation's gate."""
    size, quota, sock = 512 * MI, GI, os.path.join(h.tmp, "share.sock")
    other = os.path.join(h.tmp, "run2")
    probe = [h.a.share_probe, "--socket", sock, "--bytes", str(size)]
    backing = {"FAKEGPU_HOST_BACKING": "1Gi"}
    TruthNode(h).reset_peak()
    used = lambda: h.truth()["devices"][0]["memory_used"]
    exporter = subprocess.Popen(probe[:1] + ["export"] + probe[1:], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=h.env({**backing, "CUSHARE_MEMORY_LIMIT": "1Gi"}))
    importer = None
    try:
        ready = json.loads(exporter.stdout.readline() or "{}")
        check(ready.get("ready"), f"exporter: {exporter.stderr.read() if not ready else ready}")
        with_exporter = used()
        check(with_exporter == size + OVERHEAD, f"exporter alone: device used {with_exporter}")
        importer = subprocess.Popen(probe[:1] + ["import"] + probe[1:], text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE,
                                    env=h.env({**backing, "CUSHARE_MEMORY_LIMIT": "1Gi",
                                               "CUSHARE_RUN_DIR": other}))
        mapped = json.loads(importer.stdout.readline() or "{}")
        check(mapped.get("mapped"), f"importer: {importer.stderr.read() if not mapped else mapped}")
        check(mapped["exporter_wrote"], "the importer does not see the exporter's bytes")
        with_both = used()
        check(with_both == with_exporter + OVERHEAD, f"import charged the device: {with_both}")
        ledger = Usage(os.path.join(other, "usage")).slots()
        check([b for _, b, _ in ledger] == [0], f"importer's ledger charges the import: {ledger}")
        check(mapped["free_before"] == mapped["free_mapped"], f"importer's view moved: {mapped}")
        importer.stdin.write("let the exporter go\n")
        importer.stdin.flush()
        done = json.loads(exporter.stdout.readline() or "{}")
        check(exporter.wait(timeout=30) == 0 and done.get("importer_wrote"),
              f"exporter: {done} {exporter.stderr.read()}")
        # Exported, so charged to the exporter until it exits (docs/shim.md).
        check(ready["free_created"] == done["free_released"] == ready["free_before"] - size,
              f"exporter's view: {ready} {done}")
        check(used() == size + OVERHEAD, f"after the exporter left: device used {used()}")
        importer.stdin.write("go\n")
        importer.stdin.flush()
        last = json.loads(importer.stdout.readline() or "{}")
        check(importer.wait(timeout=30) == 0 and last.get("still_there"),
              f"importer: {last} {importer.stderr.read()}")
        # Its kernels passed its own allocation's gate.
        launches = cr.Region.read(os.path.join(other, "usage"), "usage").get("gpus", 0, "launches")
        check(launches == last["launches"],
              f"the importer's gate counted {launches} launches of {last['launches']}")
    finally:
        for p in (exporter, importer):
            if p and p.poll() is None:
                p.kill()
                p.wait()
    truth = h.truth()["devices"][0]
    check(truth["memory_used"] == 0, f"device memory not back: {truth['memory_used']}")
    # The exporter's quota holds its context; the importer adds only its own.
    check(truth["memory_used_peak"] <= quota + OVERHEAD,
          f"device peaked at {truth['memory_used_peak']} > quota {quota} + a context")


CASES = {
    "alloc_probe_4gi": case_alloc_probe_4gi,
    "gate_demand": case_gate_demand,
    "path_pitch": make_api_case("pitch"),
    "path_managed": make_api_case("managed"),
    "path_async": make_api_case("async"),
    "path_pool": make_api_case("pool"),
    "path_vmm": make_api_case("vmm"),
    "path_array": make_api_case("array"),
    "path_dlsym": case_dlsym_path,
    "path_procaddr": case_procaddr_paths,
    "resolver": case_resolver,
    "proc_replay": case_proc_replay,
    "dlsym_hook_neutral": case_dlsym_hook_neutral,
    "two_processes_share": case_two_processes_share,
    "race_and_kill": case_race_and_kill,
    "creation_race": case_creation_race,
    "two_allocations": case_two_allocations_independent,
    "bad_env": case_bad_env,
    "bad_regions": case_bad_regions,
    "env_cannot_raise": case_env_cannot_raise,
    "disable": case_disable,
    "fork": case_fork,
    "threads": case_threads,
    "stream_churn": case_stream_churn,
    "context_end": case_context_end,
    "capture_neighbour": case_capture_neighbour,
    "stream_cover": case_stream_cover,
    "oom_backtrace": case_oom_backtrace,
    "nvml": case_nvml,
    "nvml_first": case_nvml_first,
    "graph_memory": case_graph_memory,
    "graph_memory_per_thread": case_graph_memory_per_thread,
    "graph_memory_joined": case_graph_memory_joined,
    "graph_memory_nodes": case_graph_memory_nodes,
    "failed_launch": case_failed_launch,
    "visible_devices": case_visible_devices,
    "path_mipmap": case_path_mipmap,
    "kill_reclaim_live": case_kill_reclaim_live,
    "path_pool_many": case_path_pool_many,
    "path_pool_destroyed_live": case_path_pool_destroyed_live,
    "path_vmm_mapped_release": case_path_vmm_mapped_release,
    "path_graph_legacy": case_path_graph_legacy,
    "vmm_share_fd": case_vmm_share_fd,
}


def main(cases=None, options=None, prefix="cushare-shim-"):
    """Runs one case of `cases` (default: this file's) in a fresh temp folder;
    `options` adds a program's own options to the common ones."""
    cases = cases or CASES
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(cases))
    ap.add_argument("--lib", required=True)
    ap.add_argument("--fakegpu-dir", required=True)
    ap.add_argument("--stat", required=True)
    ap.add_argument("--preload-prefix", default="")
    if options:
        options(ap)
    else:
        ap.add_argument("--samples-dir", required=True)
        ap.add_argument("--probe", required=True)
        ap.add_argument("--memory-probe")
        ap.add_argument("--share-probe")
        ap.add_argument("--end-probe")
        ap.add_argument("--capture-probe")
        ap.add_argument("--cover-probe")
        ap.add_argument("--interposer", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        os.chdir(tmp)  # what a program writes lands in the case's folder
        h = Harness(args, tmp)
        try:
            cases[args.case](h)
        except Failure as e:
            print(f"FAIL {args.case}: {e}", file=sys.stderr)
            return 1
    print(f"PASS {args.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
