#!/usr/bin/python3
"""The shim in a foreign userland (ctest portable.bullseye_root).

A minimal Debian bullseye root (glibc 2.31; debootstrap --variant=minbase,
made once per build folder by scripts/bullseye) gets nothing but fakegpu's
two libraries, the shim and a C probe built against that root's glibc. Then,
with the shim loaded first through the root's /etc/ld.so.preload and then
through LD_PRELOAD:

- bash, coreutils, perl and apt (a C++ program with the root's own, older
  libstdc++) run and exit 0 with nothing on stderr, and the shim is mapped in
  them;
- the probe allocates until refused under CUSHARE_MEMORY_LIMIT: the refusal is
  CUDA_ERROR_OUT_OF_MEMORY, cuMemGetInfo shows the quota, and fakegpu's ground
  truth, sampled while the probe runs, never exceeds it.

Skips (exit 77) only when the Debian archive cannot be reached or the test
does not run as root, and never under CI=true.

Usage: bullseye_root.py --bullseye-dir DIR --make-tree scripts/bullseye --lib libcushare.so
       --fakegpu-dir DIR --stat fakegpu-stat --probe quota_probe
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
GI = 1 << 30
MI = 1 << 20
QUOTA = 1 * GI
LIB_IN_ROOT = "/opt/cushare/lib/libcushare.so"
MULTIARCH_LIBS = "/usr/lib/x86_64-linux-gnu"


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def skip_or_fail(why):
    if os.environ.get("CI") == "true":
        print(f"FAIL (CI must not skip): {why}")
        sys.exit(1)
    print(f"SKIP: {why}")
    sys.exit(SKIP)


class Root:
    """A private copy (hard links) of the pristine root, with what the test adds."""

    def __init__(self, pristine, tmp, a):
        self.path = os.path.join(tmp, "root")
        subprocess.run(["cp", "-al", pristine, self.path], check=True)
        self.stat = a.stat
        self.state_in_root = "/tmp/fakegpu.state"
        # What a container gets from the NVIDIA toolkit and from cushare: the
        # driver's libraries in the multiarch folder, the shim in its own.
        for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
            shutil.copy2(os.path.join(a.fakegpu_dir, name), self.path + MULTIARCH_LIBS)
        os.makedirs(self.path + os.path.dirname(LIB_IN_ROOT))
        shutil.copy2(a.lib, self.path + LIB_IN_ROOT)
        shutil.copy2(a.probe, self.path + "/usr/local/bin/quota_probe")

    def set_preload_file(self, on):
        p = self.path + "/etc/ld.so.preload"
        if on:
            with open(p, "w") as f:
                f.write(LIB_IN_ROOT + "\n")
        elif os.path.exists(p):
            os.unlink(p)

    def env(self, extra):
        e = {
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": "/root",
            "FAKEGPU_STATE": self.state_in_root,
            "FAKEGPU_DEVICES": "H100:80Gi:132",
            "FAKEGPU_CONTEXT_OVERHEAD": "300Mi",
            "FAKEGPU_HOST_BACKING": "0",
            "CUSHARE_RUN_DIR": "/tmp/cushare",
        }
        e.update(extra)
        return e

    def run(self, argv, extra=None, timeout=60):
        """Runs argv inside the root (own mount namespace, /proc mounted)."""
        inner = " ".join(shlex.quote(w) for w in
                         ["chroot", self.path, "/usr/bin/env", "-i"] +
                         [f"{k}={v}" for k, v in self.env(extra or {}).items()] + argv)
        script = f"mount -t proc proc {shlex.quote(self.path + '/proc')} && exec {inner}"
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               script], capture_output=True, text=True, timeout=timeout)

    def truth_used(self):
        out = subprocess.run([self.stat, "--json"], capture_output=True, text=True, timeout=30,
                             env={"FAKEGPU_STATE": self.path + self.state_in_root,
                                  "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        if out.returncode != 0:
            return None
        return json.loads(out.stdout)["devices"][0]["memory_used"]


def programs_run(root, how, extra):
    cases = [
        ["/bin/bash", "-c", "true"],
        ["/bin/true"],
        ["/usr/bin/perl", "-e", "exit 0"],
        ["/usr/bin/apt-get", "--version"],
    ]
    if os.path.exists(root.path + "/usr/bin/python3"):
        cases.append(["/usr/bin/python3", "-c", "pass"])
    else:
        print(f"  [{how}] python3 -c pass: not run (the minimal root has no Python)")
    for argv in cases:
        p = root.run(argv, extra)
        check(p.returncode == 0, f"[{how}] {' '.join(argv)} exited {p.returncode}: {p.stderr}")
        check(p.stderr == "", f"[{how}] {' '.join(argv)} wrote to stderr: {p.stderr}")
        print(f"  [{how}] {' '.join(argv)}: exit 0, stderr empty")
    p = root.run(["/bin/grep", "-c", "libcushare.so", "/proc/self/maps"], extra)
    check(p.returncode == 0 and int(p.stdout.strip() or 0) > 0,
          f"[{how}] the shim is not mapped in a process of the root: {p.stdout} {p.stderr}")
    print(f"  [{how}] libcushare.so mapped ({p.stdout.strip()} mappings)")


def quota_holds(root, how, extra):
    peak = [0]
    samples = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            used = root.truth_used()
            if used is not None:
                peak[0] = max(peak[0], used)
                samples[0] += 1
            time.sleep(0.005)

    env = dict(extra)
    env["CUSHARE_MEMORY_LIMIT"] = "1Gi"
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        p = root.run(["/usr/local/bin/quota_probe", str(64 * MI), "300"], env)
    finally:
        stop.set()
        sampler.join()
    check(p.returncode == 0, f"[{how}] quota_probe exited {p.returncode}: {p.stdout} {p.stderr}")
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    check(lines, f"[{how}] quota_probe printed no result: {p.stdout} {p.stderr}")
    r = json.loads(lines[-1])
    check(r.get("refusal") == 2, f"[{how}] refusal {r.get('refusal')} is not "
          f"CUDA_ERROR_OUT_OF_MEMORY (2): {r}")
    check(r["total_before"] == QUOTA, f"[{how}] cuMemGetInfo total {r['total_before']} != quota")
    check(r["free_before"] <= QUOTA, f"[{how}] cuMemGetInfo free {r['free_before']} > quota")
    check(r["obtained"] <= QUOTA, f"[{how}] obtained {r['obtained']} > quota")
    check(r["obtained"] >= QUOTA - 400 * MI, f"[{how}] obtained only {r['obtained']}")
    check(samples[0] >= 5, f"[{how}] only {samples[0]} ground-truth samples")
    check(peak[0] <= QUOTA, f"[{how}] ground truth peaked at {peak[0]} > quota {QUOTA}")
    check(peak[0] >= r["obtained"], f"[{how}] ground truth {peak[0]} never saw the "
          f"{r['obtained']} bytes obtained")
    print(f"  [{how}] quota 1Gi: obtained {r['obtained'] // MI} MiB in {r['allocations']} "
          f"allocations, refused with OUT_OF_MEMORY, cuMemGetInfo total {r['total_before']}, "
          f"ground truth peak {peak[0] // MI} MiB over {samples[0]} samples")
    check("quota" in p.stderr, f"[{how}] no out-of-quota log line: {p.stderr}")


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--bullseye-dir", "--make-tree", "--lib", "--fakegpu-dir", "--stat", "--probe"):
        ap.add_argument(opt, required=True)
    a = ap.parse_args()
    if os.geteuid() != 0:
        skip_or_fail("making and entering a chroot needs root")
    for tool in ("unshare", "chroot", "debootstrap"):
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} is not installed (scripts/setup installs it)")
    made = subprocess.run([a.make_tree, "root", a.bullseye_dir], capture_output=True, text=True)
    if made.returncode == 3:
        skip_or_fail(f"the Debian archive cannot be reached: {made.stderr.strip()}")
    if made.returncode != 0:
        print(f"FAIL: scripts/bullseye root: {made.stderr}")
        return 1
    pristine = os.path.join(a.bullseye_dir, "root")
    with tempfile.TemporaryDirectory(prefix="cushare-bullseye-") as tmp:
        try:
            root = Root(pristine, tmp, a)
            base = root.run(["/bin/bash", "-c", "true"])
            check(base.returncode == 0, f"the root does not run bash at all: {base.stderr}")
            root.set_preload_file(True)
            print("/etc/ld.so.preload inside the root:")
            programs_run(root, "ld.so.preload", {})
            quota_holds(root, "ld.so.preload", {})
            root.set_preload_file(False)
            print("LD_PRELOAD:")
            programs_run(root, "LD_PRELOAD", {"LD_PRELOAD": LIB_IN_ROOT})
            quota_holds(root, "LD_PRELOAD", {"LD_PRELOAD": LIB_IN_ROOT})
        except Failure as f:
            print(f"FAIL: {f}")
            return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
