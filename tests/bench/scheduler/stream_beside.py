#!/usr/bin/python3
"""Short kernels on one stream beside a 1 s kernel on another (non-blocking
unless the row says otherwise), on fakegpu:
how long the short ones take on the driver alone and under the shim (burst
and capped at 50, standalone), side by side in one run. The launch gate's
queue bound must neither hold them until the long kernel ends nor keep them
to one in flight at a time (docs/scheduler.md, "A long kernel on another
stream"). The stream_cover_probe of ctest shim.stream_cover.

    tests/bench/scheduler/stream_beside.py --build-dir build [--runs 1] [--also LIB]

`--also`: another libcushare.so (an earlier commit's build), run the same
way beside this build's, for a before and after in one run.

Prints one Markdown row per shape: ms for the short kernels, each run (and
"past" where they ended after the long kernel). Nothing else should run
meanwhile. Figures go to docs/benchmarks.md.
"""
import argparse
import json
import os
import subprocess
import tempfile

SHAPES = [
    ("800 × 100 µs, synchronised every 8", ["--short-launches", "800", "--sync-every", "8"]),
    ("800 × 100 µs, synchronised at the end", ["--short-launches", "800", "--sync-every", "800"]),
    ("2000 × 50 µs, synchronised at the end",
     ["--short-us", "50", "--short-launches", "2000", "--sync-every", "2000"]),
    ("2000 × 20 µs, synchronised at the end",
     ["--short-us", "20", "--short-launches", "2000", "--sync-every", "2000"]),
    ("800 × 100 µs on the legacy stream, every 8",
     ["--short-launches", "800", "--sync-every", "8", "--short-stream", "legacy"]),
    ("800 × 100 µs on a per-thread stream, every 8",
     ["--short-launches", "800", "--sync-every", "8", "--short-stream", "per-thread"]),
    ("800 × 100 µs on a per-thread stream, every 8, the long one blocking",
     ["--short-launches", "800", "--sync-every", "8", "--short-stream", "per-thread",
      "--long-stream", "blocking"]),
    # The long kernel's stream alone has work since the warm-up's sync, and
    # the short ones come 5 ms after it: the gate's poller records it alone.
    ("800 × 100 µs, every 8, 5 ms after the long one",
     ["--short-launches", "800", "--sync-every", "8", "--pause-us", "5000", "--warmup-on",
      "long"]),
    ("800 × 100 µs on the legacy stream, every 8, 5 ms after the long one",
     ["--short-launches", "800", "--sync-every", "8", "--pause-us", "5000", "--warmup-on",
      "long", "--short-stream", "legacy"]),
    ("800 × 100 µs, every 8, 5 ms after the long one on the legacy stream",
     ["--short-launches", "800", "--sync-every", "8", "--pause-us", "5000", "--warmup-on",
      "long", "--long-stream", "legacy"]),
    ("800 × 100 µs, every 8, 5 ms after the long one, both blocking",
     ["--short-launches", "800", "--sync-every", "8", "--pause-us", "5000", "--warmup-on",
      "long", "--long-stream", "blocking", "--short-stream", "blocking"]),
]
MODES = [("driver alone", None),
         ("shim, burst", {"CUSHARE_COMPUTE_MODE": "burst"}),
         ("shim, capped 50", {"CUSHARE_COMPUTE_MODE": "capped", "CUSHARE_COMPUTE_LIMIT": "50"})]


def run_once(build, tmp, args, mode, library):
    """The short kernels' time in ms, and whether the long one still ran then."""
    state = os.path.join(tmp, "fakegpu.state")
    if os.path.exists(state):
        os.remove(state)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "fakegpu"), FAKEGPU_STATE=state,
               FAKEGPU_DEVICES="H100:80Gi:132", FAKEGPU_HOST_BACKING="0")
    if mode is not None:
        folder = tempfile.mkdtemp(dir=tmp)
        env.update(mode, LD_PRELOAD=library, CUSHARE_RUN_DIR=folder)
    out = subprocess.run([os.path.join(build, "bin", "stream_cover_probe"), *args], env=env,
                         capture_output=True, text=True, check=True, timeout=120).stdout
    got = json.loads(out.strip().splitlines()[-1])
    return got["short_phase_ns"] / 1e6, got["long_pending_after_short"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--also", metavar="LIB", help="another libcushare.so, run beside")
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    ours = os.path.join(build, "lib", "libcushare.so")
    columns = [(name, mode, ours) for name, mode in MODES]
    if a.also:
        columns += [(f"{name} ({a.also})", mode, os.path.abspath(a.also))
                    for name, mode in MODES if mode is not None]
    print("| short kernels beside a 1 s one | " + " | ".join(c[0] for c in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in SHAPES:
            cells = []
            for _, mode, library in columns:
                runs = [run_once(build, tmp, args, mode, library) for _ in range(a.runs)]
                cells.append(", ".join(f"{ms:.0f}" + ("" if pending else " (past)")
                                       for ms, pending in runs))
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
