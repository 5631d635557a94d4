#!/usr/bin/python3
"""Where the launch gate's time goes: gate_bench without a daemon (the gate's
local go, burst mode) under `perf record`, then the CPU time per launch
through libcushare.so of each of the shim's hottest functions, and the
instructions that take the most samples in the gate's entry and exit.

    tests/bench/scheduler/gate_profile.py --build-dir build [--frequency 20000]

Needs `perf` (apt-get install linux-perf) and a kernel that lets it sample
(perf_event_paranoid <= 1, or root). The figures are sampled, not timed:
samples x the sampling period / the launches through the shim (the
measured rounds and the warm-up), so they carry the sampling's error; the
share of each instruction includes the skid of the samples that land just
after a slow one (the instruction after `rdtsc` stands for the counter read).
Nothing else should run meanwhile. Figures go to docs/benchmarks.md.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

GATE = ["cushare::shim::launch_gate_enter", "cushare::shim::launch_gate_exit"]


def hottest_instructions(data, symbol, top):
    out = subprocess.run(["perf", "annotate", "-i", data, "--stdio", "-s", symbol],
                         capture_output=True, text=True).stdout
    rows = []
    lines = out.splitlines()
    # The function's own section only (its .cold part follows as another).
    headers = [i for i, l in enumerate(lines) if l.lstrip().startswith("Percent |")]
    if len(headers) > 1:
        lines = lines[:headers[1]]
    for i, line in enumerate(lines):
        m = re.match(r"\s+([0-9.]+)\s+:\s+([0-9a-f]+):\s+(.*)", line)
        if not m or float(m.group(1)) == 0:
            continue
        # The instruction before, for a sample that skidded past a slow one.
        before = ""
        for prev in reversed(lines[:i]):
            p = re.match(r"\s+[0-9.]+\s+:\s+[0-9a-f]+:\s+(.*)", prev)
            if p:
                before = p.group(1).strip()
                break
        rows.append((float(m.group(1)), m.group(3).strip(), before))
    return sorted(rows, reverse=True)[:top]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--frequency", type=int, default=20000, help="samples per second of CPU time")
    ap.add_argument("--rounds", type=int, default=300)
    a = ap.parse_args()
    if not shutil.which("perf"):
        print("gate_profile: perf is not installed (apt-get install linux-perf)", file=sys.stderr)
        return 2
    build = os.path.abspath(a.build_dir)
    with tempfile.TemporaryDirectory(prefix="gate-profile-") as tmp:
        folder = os.path.join(tmp, "run", "alloc", "bench")
        os.makedirs(folder)
        env = dict(os.environ, FAKEGPU_STATE=os.path.join(tmp, "state"),
                   FAKEGPU_DEVICES="H100:80Gi:132", LD_LIBRARY_PATH=os.path.join(build, "fakegpu"),
                   LD_PRELOAD=os.path.join(build, "lib", "libcushare.so"), CUSHARE_RUN_DIR=folder,
                   CUSHARE_COMPUTE_MODE="burst", CUSHARE_LOG_LEVEL="error")
        data = os.path.join(tmp, "perf.data")
        run = subprocess.run(["perf", "record", "-F", str(a.frequency), "-o", data, "--",
                              os.path.join(build, "bin", "gate_bench"), str(a.rounds), "2000"],
                             env=env, capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stderr, file=sys.stderr)
            return 1
        bench = json.loads([l for l in run.stdout.splitlines() if l.startswith("{")][-1])
        launches = (bench["rounds"] + bench["warm_up_rounds"]) * bench["launches_per_round"]
        # One line per sample: "address symbol (dso)".
        script = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,dso"],
                                capture_output=True, text=True, check=True).stdout
        counts, samples = {}, 0
        for line in script.splitlines():
            m = re.match(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
            if not m:
                continue
            samples += 1
            if os.path.basename(m.group(2)) == "libcushare.so":
                counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        period_ns = 1e9 / a.frequency
        print(f"gate_bench {a.rounds} rounds x 2000, no daemon: {bench['direct_ns']:.1f} ns per driver "
              f"launch, {bench['shim_ns']:.1f} through the shim, {bench['added_ns_median']:.1f} added "
              f"(median); {samples} samples at {a.frequency} Hz, {launches} launches through the shim\n")
        print("| libcushare.so function | samples | ns per launch through the shim |")
        print("|---|---|---|")
        ns_of = lambda n: n * period_ns / launches
        for symbol, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            if ns_of(n) >= 0.5:
                print(f"| `{symbol.split('(')[0]}` | {n} | {ns_of(n):.1f} |")
        shim = sum(counts.values())
        print(f"| **all of libcushare.so** | {shim} | **{ns_of(shim):.1f}** |\n")
        for symbol in GATE:
            print(f"Hottest instructions of `{symbol}` (share of its samples; the one before):")
            for pct, insn, before in hottest_instructions(data, symbol, 4):
                print(f"- {pct:.1f} %: `{insn}` (after `{before}`)")
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
