#!/usr/bin/python3
"""Runs shim_bench with and without libcushare.so preloaded, alternating
several times on fakegpu, and prints the fastest ns per call of each and the
difference (the time the shim adds). The minimum over rounds is used because
the shared build machines are loaded: interference only ever adds time.
Figures go to docs/benchmarks.md (## shim).

Usage: run_shim_bench.py <build dir> [--rounds N] [--lib other/libcushare.so]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

BUDGET = {"BM_AllocFreePair/1048576": 100.0, "BM_PassThroughCtxGetDevice": 10.0}


def run(bench, env):
    out = subprocess.run([bench, "--benchmark_format=json", "--benchmark_min_time=0.1",
                          "--benchmark_repetitions=3"],
                         env=env, capture_output=True, text=True, check=True)
    best = {}
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        best[b["run_name"]] = min(best.get(b["run_name"], float("inf")), b["cpu_time"])
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--lib", help="the library to preload (default: the build's)")
    a = ap.parse_args()
    bench = os.path.join(a.build, "bin", "shim_bench")
    lib = os.path.abspath(a.lib) if a.lib else os.path.join(a.build, "lib", "libcushare.so")
    with tempfile.TemporaryDirectory() as tmp:
        base = dict(os.environ)
        base.update({"LD_LIBRARY_PATH": os.path.join(a.build, "fakegpu"),
                     "FAKEGPU_STATE": os.path.join(tmp, "state"),
                     "FAKEGPU_HOST_BACKING": "0",
                     "CUSHARE_RUN_DIR": os.path.join(tmp, "run"),
                     "CUSHARE_MEMORY_LIMIT": "8Gi"})
        shim = dict(base, LD_PRELOAD=lib)
        without, with_shim = {}, {}
        for _ in range(a.rounds):
            for name, t in run(bench, base).items():
                without.setdefault(name, []).append(t)
            for name, t in run(bench, shim).items():
                with_shim.setdefault(name, []).append(t)
    print(f"{'benchmark (min CPU ns/call)':34} {'without':>9} {'with':>9} {'added':>9}  budget")
    ok = True
    for name in without:
        w, s = min(without[name]), min(with_shim[name])
        budget = BUDGET.get(name)
        verdict = "" if budget is None else ("ok" if s - w < budget else "OVER") + f" (<{budget:g})"
        ok &= budget is None or s - w < budget
        print(f"{name:34} {w:9.1f} {s:9.1f} {s - w:9.1f}  {verdict}")
    # The shim's own bookkeeping per pair, no driver involved (stable figure).
    book = run(os.path.join(a.build, "bin", "shim_bookkeeping_bench"), dict(os.environ))
    for name, t in book.items():
        print(f"{name:34} {'':9} {t:9.1f} {'':9}  (ledger + pointer table only)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
