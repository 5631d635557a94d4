#!/usr/bin/python3
"""ctest security.daemon_capabilities: cushared needs only the capabilities
docs/kubernetes.md lists ("What cushared needs from the node"), and it needs
each of them.

cushared runs as root with its capability bounding set narrowed by setpriv, as
a container with `drop: [ALL]` and `add: [...]` runs it. A tenant of another
uid allocates past its 1 GiB quota behind the shim's back (bypass_probe
--via dlvsym): with SYS_PTRACE, KILL and SYS_NICE the daemon verifies the
process (ptrace-read of /proc/<pid>/ns/pid and maps), kills it on ground
truth, and runs its scheduling thread SCHED_RR; without SYS_PTRACE the same
process is never verified, so never stopped.

Usage: capabilities.py --build-dir BUILD
"""
import argparse
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import cushare_test as ct  # noqa: E402
from cushare_test import GI, MI, check  # noqa: E402

SCHED_RR = 2


def narrowed(caps):
    return ["setpriv", "--bounding-set", "-all," + ",".join("+" + c for c in caps),
            "--inh-caps", "-all", "--"]


def policies(pid):
    """Scheduling policy of each thread of `pid` (field 41 of stat)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            out.append(int(f.read().rsplit(")", 1)[1].split()[38]))
    return out


def effective_caps(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return None


def bypass(node, probe, seconds):
    """The bypassing tenant; returns (exit status, seconds it ran, whether
    it was still running at the end, when the test stopped it)."""
    folder = node.create("team", "--memory-limit", "1Gi")
    c = ct.Container(node, folder)
    t0 = time.monotonic()
    p = c.popen([probe, "--via", "dlvsym", "alloc", str(3 * GI), str(256 * MI), "20000"])
    survived = False
    try:
        p.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        survived = True
        p.kill()
        p.communicate()
    return p.returncode, time.monotonic() - t0, survived


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    args = ap.parse_args()
    b = ct.Build(args.build_dir)
    ct.need_root()  # and setpriv
    probe = os.path.join(b.dir, "tests", "integration", "security", "bypass_probe")
    needed = ["sys_ptrace", "kill", "sys_nice"]
    try:
        with ct.Node(b) as node:
            node.start_daemon("--over-quota-grace-ms", "1000", "--realtime-priority", "10",
                              prefix=narrowed(needed))
            caps = effective_caps(node.daemon.pid)
            check(caps == (1 << 19) | (1 << 5) | (1 << 23),  # SYS_PTRACE, KILL, SYS_NICE
                  f"cushared runs with CapEff {caps:#x}, not the three capabilities")
            # The scheduling thread raises itself once it runs, which may
            # come a moment after the daemon answers (a sanitizer build).
            deadline = time.monotonic() + 5
            while SCHED_RR not in policies(node.daemon.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            check(SCHED_RR in policies(node.daemon.pid),
                  f"no SCHED_RR thread in cushared:\n{node.daemon_log()}")
            rc, took, survived = bypass(node, probe, 20)
            check(rc == -signal.SIGKILL and not survived, f"with {needed}: the bypassing process was not killed "
                  f"(exit {rc}):\n{node.daemon_log()}")
            check("Operation not permitted" not in node.daemon_log(), node.daemon_log())
            print(f"  with {', '.join(needed)}: SCHED_RR, bypassing tenant killed after {took:.1f} s")
        without = ["kill", "sys_nice"]
        with ct.Node(b) as node:
            node.start_daemon("--over-quota-grace-ms", "1000", prefix=narrowed(without))
            rc, took, survived = bypass(node, probe, 6)
            check(survived, f"with {without} only the tenant was still killed (exit {rc}): "
                  f"the test does not show that SYS_PTRACE is needed:\n{node.daemon_log()}")
            print(f"  with {', '.join(without)}: the tenant ran {took:.1f} s unverified, not killed")
    except ct.Failure as e:
        print(f"FAIL: {e}")
        return 1
    print("security.daemon_capabilities: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
