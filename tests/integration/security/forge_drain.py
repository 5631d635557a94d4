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
"""
import mmap
import os
import struct
import sys
import time

GPU0 = 256  # shm/layout.hpp: usage.gpus[0]
LAST_SUBMIT_NS = GPU0 + 16
DRAINED_NS = GPU0 + 24
BUSY_PROCESSES = GPU0 + 96
IDLE_NS = GPU0 + 120


def main():
    path, seconds = sys.argv[1], float(sys.argv[2])
    idle = "--idle" in sys.argv[3:]
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, 0)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if idle:
            (submit,) = struct.unpack_from("<Q", m, LAST_SUBMIT_NS)
            (gaps,) = struct.unpack_from("<Q", m, IDLE_NS)
            struct.pack_into("<Q", m, IDLE_NS, gaps + 2_000_000)
            struct.pack_into("<Q", m, DRAINED_NS, submit + 1000)
        else:
            struct.pack_into("<Q", m, DRAINED_NS, now + 10**9)
        struct.pack_into("<I", m, BUSY_PROCESSES, 0)
        time.sleep(0.0002)


if __name__ == "__main__":
    main()
