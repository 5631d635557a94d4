#!/usr/bin/python3
"""ctest daemon.discovery_latency: cushared finds a new allocation from its
inotify events, not only at its once-a-second rescan. The daemon's loop reads
the inotify queue only when its poll() said the queue was readable, so a loop
that lost its events would still find every allocation, a second late: here
five allocations created at odd moments must each be ticked (the daemon's
heartbeat in their `limits`) within MAX_LATENCY_S. By the rescan alone each
would have a 0-1 s wait, all five under the bound about 1 % of the time;
by events it is a few milliseconds.

Usage: discovery_latency.py --build-dir BUILD
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import cushare_regions as cr  # noqa: E402
import cushare_test as ct  # noqa: E402

ALLOCATIONS = 5
MAX_LATENCY_S = 0.4


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def heartbeat(folder):
    try:
        return cr.read(folder, "limits").get("daemon_heartbeat_ns")
    except cr.RegionError:
        return 0


def discovery_latencies(build, tmp):
    """Seconds from each of ALLOCATIONS `cusharectl create` (once it has
    returned) to the daemon's first tick of it, with cushared on a run dir in `tmp`."""
    run = os.path.join(tmp, "run")
    os.makedirs(os.path.join(run, "alloc"))
    env = ct.fakegpu_env(build, tmp)
    log_path = os.path.join(tmp, "cushared.log")
    # A daemon that cannot start raises ct.Failure, which fails the test.
    daemon = ct.start_daemon(os.path.join(build, "bin", "cushared"), run, env=env,
                             log_path=log_path)
    try:
        time.sleep(1.2)  # past its start-up scan: from here on, events or rescans
        rng = random.Random(7)
        latencies = []
        for i in range(ALLOCATIONS):
            time.sleep(rng.uniform(0.15, 0.45))  # not in step with the rescan
            name = f"a{i}"
            folder = os.path.join(run, "alloc", name)
            subprocess.run([os.path.join(build, "bin", "cusharectl"), "--run-dir", run, "create",
                            name, "--memory-limit", "1Gi"], env=env, check=True,
                           capture_output=True)
            # From when the allocation exists: cusharectl's own start-up (long
            # under a sanitizer) is no part of the daemon's latency.
            created = time.monotonic()
            while heartbeat(folder) == 0 and time.monotonic() < created + 3:
                time.sleep(0.002)
            if heartbeat(folder) == 0:
                fail(f"{name} was not discovered within 3 s:\n{open(log_path).read()}")
            latencies.append(time.monotonic() - created)
        if not daemon.alive():
            fail("cushared exited")
        return latencies
    finally:
        daemon.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    build = os.path.abspath(ap.parse_args().build_dir)
    with tempfile.TemporaryDirectory(prefix="cushare-discovery-") as tmp:
        latencies = discovery_latencies(build, tmp)
    print("discovered after " + ", ".join(f"{1000 * s:.0f} ms" for s in latencies))
    slow = [s for s in latencies if s > MAX_LATENCY_S]
    if slow:
        fail(f"{len(slow)} of {len(latencies)} allocations took over "
             f"{MAX_LATENCY_S * 1000:.0f} ms to be discovered: waiting for a rescan, "
             "the daemon's loop is not reading its inotify events")
    print("ok")


if __name__ == "__main__":
    main()
