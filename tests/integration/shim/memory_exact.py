#!/usr/bin/python3
"""ctest shim.memory_exact_*: the memory quota holds by ground truth on the
paths where the driver takes memory the allocation calls do not show:
contexts (reserved before the driver makes them), contexts made without a
hooked call, and the driver's allocation granularity. Every case samples
fakegpu's ground truth while the workload runs and asserts its maximum.

Usage: memory_exact.py CASE --build-dir BUILD
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import cushare_test as ct  # noqa: E402
from cushare_test import GI, MI, check  # noqa: E402


def probe(b):
    return os.path.join(b.dir, "tests", "integration", "shim", "context_probe")


class Standalone:
    """Processes of one standalone allocation (the environment configures it)."""

    def __init__(self, node, quota, overhead="300Mi"):
        self.node = node
        self.env = dict(node.env)
        self.env.update({
            "LD_PRELOAD": node.b.preload_prefix + node.b.lib,
            "CUSHARE_RUN_DIR": os.path.join(node.tmp, "alloc"),
            "CUSHARE_MEMORY_LIMIT": quota,
            "FAKEGPU_CONTEXT_OVERHEAD": overhead,
            "CUSHARE_LOG_LEVEL": "warn",
        })

    def popen(self, argv, extra=None):
        env = dict(self.env)
        env.update(extra or {})
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        self.node.procs.append(p)
        return p

    def run(self, argv, extra=None, timeout=120):
        p = self.popen(argv, extra)
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err

    def hold(self, argv, what):
        """Starts `argv`, a process that prints a JSON line once it holds its
        memory and then keeps it: (the process, its line) once printed."""
        p = self.popen(argv)
        line = ct.LineReader(p.stdout).line(time.monotonic() + 60)
        if line is None or ct.last_json(line) is None:
            stop(p)
            check(False, f"{what} reported no allocation (exit status {p.returncode}): "
                         f"{line!r} {p.stderr.read()}")
        return p, ct.last_json(line)


def stop(p):
    """Kills a holder the case is done with (Node.close would, later)."""
    p.kill()
    p.wait()


def case_two_processes(b):
    """The first process fills a 4 GiB allocation; a second one starting into
    it is refused its context instead of pushing the device over."""
    with ct.Node(b) as node:
        alloc = Standalone(node, "4Gi")
        with ct.Sampler(node) as s:
            # Holds until killed: the second process may be slow to start.
            first, _ = alloc.hold([b.sample("alloc_probe"), "--step", "64Mi", "--hold-seconds",
                                   "120"], "the first process")
            rc, out, err = alloc.run([b.sample("alloc_probe"), "--step", "64Mi"])
            stop(first)
        r = ct.last_json(out)
        check(s.peak <= 4 * GI, f"ground truth peaked at {s.peak} > 4 GiB")
        check(rc != 0 or (r and r["bytes"] == 0),
              f"the second process got memory in a full allocation: {out} {err}")
        check("context creation" in err and "refused" in err, f"no refusal line: {err}")
        print(f"  second process refused its context; ground truth high-water mark "
              f"{s.peak / MI:.0f} MiB on 4096 MiB")


def case_threads_race(b):
    """16 threads create contexts at once 64 MiB below the quota: none fits
    (each reserves its overhead first), and the device never goes over."""
    with ct.Node(b) as node:
        alloc = Standalone(node, "2Gi")
        with ct.Sampler(node) as s:
            # Fill to 64 MiB below the quota: context 300 MiB + 1664 MiB.
            holder, _ = alloc.hold([b.sample("alloc_probe"), "--step", "64Mi", "--hold-seconds",
                                    "120"], "the holder")
            rc, out, err = alloc.run([probe(b), "threads", "16", "300"])
            stop(holder)
        r = ct.last_json(out)
        check(r is not None, f"context_probe: {out} {err}")
        check(s.peak <= 2 * GI, f"ground truth peaked at {s.peak} > 2 GiB: {r}")
        check(r["created"] == 0 and r["refused"] == 16, f"contexts created over the quota: {r}")
        print(f"  16 racing cuCtxCreate_v2 with the allocation full: {r}; ground truth peak "
              f"{s.peak / MI:.0f} MiB on 2048 MiB")


def case_threads_fit_some(b):
    """16 threads create contexts at once where three fit: exactly the ones
    that fit are made."""
    with ct.Node(b) as node:
        alloc = Standalone(node, "1Gi", overhead="300Mi")
        # A first context measured (its overhead is learnt: 300 MiB + margin).
        alloc.run([b.sample("alloc_probe"), "--max", "0"])
        with ct.Sampler(node) as s:
            rc, out, err = alloc.run([probe(b), "threads", "16", "500"])
        r = ct.last_json(out)
        check(r is not None and r["other"] == 0, f"context_probe: {out} {err}")
        check(s.peak <= GI, f"ground truth peaked at {s.peak} > 1 GiB: {r}")
        check(1 <= r["created"] <= 3, f"{r['created']} of 16 contexts made in 1 GiB: {r}")
        print(f"  16 racing contexts in 1 GiB: {r}; ground truth peak {s.peak / MI:.0f} MiB")


def case_processes_threads(b):
    """16 processes x 8 threads create contexts, allocate (plain, pitch,
    managed, async, VMM, arrays) and free at random against a 2 GiB quota that
    cannot hold all their contexts: no sample of ground truth above the quota."""
    with ct.Node(b) as node:
        alloc = Standalone(node, "2Gi", overhead="128Mi")
        alloc.env["CUSHARE_LOG_LEVEL"] = "off"
        with ct.Sampler(node, period=0.002) as s:
            procs = [alloc.popen([probe(b), "mixed", "8", "3", str(i)]) for i in range(16)]
            results = []
            for p in procs:
                out, err = p.communicate(timeout=120)
                check(p.returncode == 0, f"a racing process failed: {out} {err}")
                results.append(ct.last_json(out))
        contexts = sum(r["contexts"] for r in results)
        refusals = sum(r["context_refusals"] for r in results)
        check(contexts > 16 and refusals > 0, f"the race did not contend: {results}")
        check(s.peak <= 2 * GI, f"ground truth peaked at {s.peak} > 2 GiB")
        print(f"  16 x 8 threads: {contexts} contexts made, {refusals} refused, "
              f"{sum(r['allocations'] for r in results)} allocations; ground truth high-water mark "
              f"{s.peak / MI:.0f} MiB, quota 2048 MiB")


def case_busy_process(b):
    """A process keeping the GPU busy (its launch gate's poller waiting on
    events, its stream-ordered memory given back at its syncs) creates
    contexts: each is measured in a window that gets quiet without waiting
    for the GPU work, and the quota holds by ground truth."""
    with ct.Node(b) as node:
        alloc = Standalone(node, "4Gi", overhead="300Mi")
        with ct.Sampler(node, period=0.002) as s:
            rc, out, err = alloc.run([probe(b), "busy", "20"])
        r = ct.last_json(out)
        check(rc == 0 and r, f"context_probe: {out} {err}")
        check(r["launches"] > 8, f"the GPU was not kept busy: {r}")
        check(s.peak <= 4 * GI, f"ground truth peaked at {s.peak} > 4 GiB: {r}")
        # The window does not wait for the GPU work the process has queued.
        check(r["median_ms"] < 50, f"context creations waited on the busy GPU: {r}")
        print(f"  20 contexts made beside a busy GPU ({r['launches']} launches): median "
              f"{r['median_ms']:.1f} ms, max {r['max_ms']:.1f} ms per creation; ground truth "
              f"high-water mark {s.peak / MI:.0f} MiB on 4096 MiB")


def case_pool_trim_race(b):
    """Contexts made while another thread's synchronisations give 64 MiB of
    pool memory back to the device at a time: a trim inside a creation's
    samples is the pool's, not the context's, so no context is charged low,
    and filling the quota afterwards never takes the device past it."""
    with ct.Node(b) as node:
        alloc = Standalone(node, "8Gi")
        with ct.Sampler(node, period=0.002) as s:
            # Creations as slow as a driver's let the trims land inside them.
            rc, out, err = alloc.run([probe(b), "trim-race", "24"],
                                     extra={"FAKEGPU_CONTEXT_CREATE_US": "5000"})
        r = ct.last_json(out)
        check(rc == 0 and r, f"context_probe: {out} {err}")
        check(r["contexts"] >= 1 and r["trims"] > 0, f"nothing raced: {r}")
        check(s.peak <= 8 * GI, f"ground truth peaked at {s.peak} > 8 GiB: {r}")
        print(f"  {r['contexts']} contexts made beside {r['trims']} pool trims, then "
              f"{r['bytes'] // MI} MiB allocated; ground truth high-water mark "
              f"{s.peak / MI:.0f} MiB on 8192 MiB")


def case_exit_holds_charge(b):
    """A process's memory stays charged until the process is gone: one that
    fills the quota and then spends a while exiting (its own exit handlers,
    after the shim's) keeps a second process from the memory meanwhile."""
    with ct.Node(b) as node:
        alloc = Standalone(node, "1Gi")  # contexts of 300 MiB: 812 MiB held
        with ct.Sampler(node, period=0.002) as s:
            # Its exit lasts until it is killed: the second process may be slow
            # to start, and must still find the first one exiting.
            first, r = alloc.hold([probe(b), "slow-exit", str(512 * MI), "120"],
                                  "the first process")
            check(r == {"last": 0}, f"the first process did not allocate: {r}")
            time.sleep(0.3)  # past the shim's exit handler, which runs first
            rc, out, err = alloc.run([b.sample("alloc_probe"), "--step", "64Mi"])
            stop(first)
        r = ct.last_json(out)
        check(s.peak <= GI, f"ground truth peaked at {s.peak} > 1 GiB while a process exited")
        check(rc != 0 or (r and r["bytes"] == 0),
              f"the second process got memory still held by an exiting one: {out} {err}")
        print(f"  a second process started during the first one's exit got nothing; ground "
              f"truth high-water mark {s.peak / MI:.0f} MiB on 1024 MiB")


def case_private_primary(b):
    """A primary context made through the runtime's private path (no hooked
    call) is charged the first time the process allocates on the device."""
    with ct.Node(b) as node:
        alloc = Standalone(node, "1Gi")
        with ct.Sampler(node) as s:
            rc, out, err = alloc.run([probe(b), "private-primary", str(64 * MI)])
        check(rc != 77, "fakegpu has no private retain")
        r = ct.last_json(out)
        check(rc == 0 and r, f"context_probe: {out} {err}")
        check(r["last"] == 2, f"not refused with CUDA_ERROR_OUT_OF_MEMORY: {r}")
        check(s.peak <= GI, f"ground truth peaked at {s.peak} > 1 GiB: {r}")
        check(r["bytes"] <= GI - 300 * MI, f"the context was not charged: {r}")
        print(f"  private primary context: {r['bytes'] // MI} MiB allocated, ground truth peak "
              f"{s.peak // MI} MiB on 1024 MiB")


def case_granularity(b):
    """cuMemAlloc(1) until refused: each takes 512 B of the device, and the
    quota holds on what the device gives, not on what was asked."""
    with ct.Node(b) as node:
        # The first context of an allocation needs its architecture's default
        # reservation free (640 MiB on Hopper), so the quota is above it.
        alloc = Standalone(node, "768Mi", overhead="300Mi")
        with ct.Sampler(node) as s:
            rc, out, err = alloc.run([probe(b), "tiny", "3000000"], timeout=300)
        r = ct.last_json(out)
        check(rc == 0 and r, f"context_probe: {out} {err}")
        check(r["last"] == 2, f"not refused: {r}")
        check(s.peak <= 768 * MI, f"ground truth peaked at {s.peak} > 768 MiB: {r}")
        expected = (768 - 300) * MI // 512
        check(abs(r["allocations"] - expected) <= 2048,
              f"{r['allocations']} one-byte allocations, expected about {expected} (512 B each)")
        print(f"  {r['allocations']} cuMemAlloc(1) in 468 MiB (512 B each); ground truth peak "
              f"{s.peak / MI:.1f} MiB on 768 MiB")


def case_array_at_the_edge(b):
    """1 MiB arrays until refused, with an odd MiB of the quota left at the
    end: an array takes whole 2 MiB pages of the device (fakegpu, as the
    driver), so the last one must be refused before it is made, and the
    device never holds more than the quota (fakegpu's own high-water mark,
    not a sample)."""
    with ct.Node(b, overhead="301Mi") as node:
        # A context of 301 MiB leaves 723 MiB: 361 arrays of 2 MiB, then 1 MiB
        # (alloc_probe counts each array's 1 MiB of texels).
        alloc = Standalone(node, "1Gi", overhead="301Mi")
        node.reset_peak()
        rc, out, err = alloc.run([b.sample("alloc_probe"), "--api", "array", "--step", "1Mi"])
        r = ct.last_json(out)
        check(r is not None and r["result"] == "CUDA_ERROR_OUT_OF_MEMORY",
              f"alloc_probe --api array: {out} {err}")
        peak = node.device()["memory_used_peak"]
        check(peak <= GI, f"the device peaked at {peak} bytes, over the 1 GiB quota: {r}")
        arrays = r["bytes"] // MI
        check(arrays >= 350, f"arrays stopped early: {arrays} of 1 MiB")
        print(f"  {arrays} arrays of 1 MiB (2 MiB pages each) in 1 GiB; device peak "
              f"{peak / MI:.1f} MiB")


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    sys.exit(ct.run_cases(CASES))
