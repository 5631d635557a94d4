#!/usr/bin/python3
"""Runs inside a tenant's container (security.forged_drain): keeps writing
"everything I submitted has completed" into its own usage region (drained_ns
far ahead, no busy processes), so the scheduler would hand the lease on while
its kernels still run.

Usage: forge_drain.py USAGE_FILE SECONDS
"""
import mmap
import os
import struct
import sys
import time

GPU0 = 256  # shm/layout.hpp: usage.gpus[0]
DRAINED_NS = GPU0 + 24
BUSY_PROCESSES = GPU0 + 96


def main():
    path, seconds = sys.argv[1], float(sys.argv[2])
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, 0)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        struct.pack_into("<Q", m, DRAINED_NS, now + 10**9)
        struct.pack_into("<I", m, BUSY_PROCESSES, 0)
        time.sleep(0.0002)


if __name__ == "__main__":
    main()
