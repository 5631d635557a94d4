#!/usr/bin/python3
"""A stand-in for a hypervisor taking a CPU away (steal): started by
scenario.py --stalls as SCHED_FIFO, pinned to one CPU, it holds that CPU for
BURST_MS at random moments, PERIOD_MS apart on average, until killed, its
parent dies or an hour has passed (a real-time spinner must not outlive its
test). Nothing
on the CPU runs meanwhile: the tenants, their pollers, the daemon at its
real-time priority (lower than this one's) all wait, as they do when the VM's
vCPU is descheduled.

  stall_cpu.py BURST_MS PERIOD_MS
"""
import ctypes
import random
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
MAX_SECONDS = 3600


def main():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    burst, period = float(sys.argv[1]) / 1e3, float(sys.argv[2]) / 1e3
    rng = random.Random()
    end = time.monotonic() + MAX_SECONDS
    while time.monotonic() < end:
        time.sleep(rng.uniform(0, 2 * max(period - burst, 0)))
        start = time.monotonic()
        while time.monotonic() - start < burst:
            pass


if __name__ == "__main__":
    main()
