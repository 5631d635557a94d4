#!/usr/bin/python3
"""A stand-in for a hypervisor taking a CPU away (steal): started by
scenario.py --stalls as SCHED_FIFO, pinned to one CPU, it holds that CPU for
BURST_MS at random moments, PERIOD_MS apart on average, until killed. Nothing
on the CPU runs meanwhile: the tenants, their pollers, the daemon at its
real-time priority (lower than this one's) all wait, as they do when the VM's
vCPU is descheduled.

  stall_cpu.py BURST_MS PERIOD_MS
"""
import random
import sys
import time


def main():
    burst, period = float(sys.argv[1]) / 1e3, float(sys.argv[2]) / 1e3
    rng = random.Random()
    while True:
        time.sleep(rng.uniform(0, 2 * max(period - burst, 0)))
        start = time.monotonic()
        while time.monotonic() - start < burst:
            pass


if __name__ == "__main__":
    main()
