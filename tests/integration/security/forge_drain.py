#!/usr/bin/python3
"""Runs inside a tenant's container: keeps forging its own usage region.

  forge_drain.py USAGE_FILE SECONDS          (security.forged_drain)
      "everything I submitted has completed" (drained_ns far ahead, no busy
      processes), so the scheduler would hand the lease on while its kernels
      still run.
  forge_drain.py USAGE_FILE SECONDS --idle   (security.forged_idle)
      "my lease was idle": idle_ns grows faster than time, and the queue is
      declared drained just after each submission, so every lease would be
      refunded as idle.
  forge_drain.py USAGE_FILE SECONDS --hide-idle   (security.hidden_idle)
      "my leases were never idle": idle_ns pinned where it was, so no idle
      gap the gate measured is refunded (it only costs the tenant itself).
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import cushare_regions as cr  # noqa: E402


def main():
    path, seconds = sys.argv[1], float(sys.argv[2])
    idle = "--idle" in sys.argv[3:]
    hide_idle = "--hide-idle" in sys.argv[3:]
    usage = cr.Region.map(path, "usage")
    gpu0 = ("gpus", 0)
    end = time.monotonic() + seconds
    pinned = usage.get(*gpu0, "idle_ns")
    while hide_idle and time.monotonic() < end:
        usage.set(pinned, *gpu0, "idle_ns")
        time.sleep(0.00005)
    while time.monotonic() < end:
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if idle:
            submit = usage.get(*gpu0, "last_submit_ns")
            gaps = usage.get(*gpu0, "idle_ns")
            usage.set(gaps + 2_000_000, *gpu0, "idle_ns")
            usage.set(submit + 1000, *gpu0, "drained_ns")
        else:
            usage.set(now + 10**9, *gpu0, "drained_ns")
        usage.set(0, *gpu0, "busy_processes")
        time.sleep(0.0002)


if __name__ == "__main__":
    main()
