"""Measuring shares of GPU time on a host we do not control: the rules every
test that judges fakegpu's busy time follows (ctest daemon.*, the security
cases that measure a share, tests/bench/scheduler), in one place.

- A window in which a hypervisor took more than STEAL_LIMIT_PCT of the host's
  CPU time (`steal` in /proc/stat) measures the VM, not the scheduler: every
  thread a hand-off waits for, the daemon's too, whatever its priority, was
  off the CPU for part of it (on the development VM, four equal tenants ran
  at 88 % with a fifth of the CPU stolen, at 97.5-97.9 % with 0.5 % stolen
  around it). Such a window is measured again, up to WINDOWS windows in all;
  the last one is judged whatever its steal, so a host that is always
  starved fails. A tenant must live WINDOWS windows past its warm-up.
  Some hypervisors never count steal (Firecracker's guests read 0): there a
  probe at real-time priority (host_stall_probe, built in tests/lib) adds up
  how late it wakes during the window, and a window it found stalled for
  more than STEAL_LIMIT_PCT of its length is measured again in the same way.
- In a sanitizer build (CUSHARE_TEST_SANITIZED=1, set by
  cmake/Sanitizers.cmake) the shim, its poller, the daemon and fakegpu run
  instrumented, several times slower on exactly the paths a hand-off waits
  for, so the figures measure the instrumentation. The tests still run
  there, for what the sanitizers find in the code they exercise and for gross
  errors: a bound that being slow can break (a lower bound on a share, a
  tolerance around a split) widens by SANITIZED_SLACK points. A bound being
  slow never breaks (a cap, what an attacker may take) never widens.

Import with:  sys.path.insert(0, <repo>/tests/lib); import cushare_timing as tm
"""
import json
import os
import signal
import subprocess
import time
from typing import NamedTuple

STEAL_LIMIT_PCT = 5.0
WINDOWS = 3
SANITIZED = os.environ.get("CUSHARE_TEST_SANITIZED") == "1"
SANITIZED_SLACK = 10 if SANITIZED else 0

# What a sanitizer prints when it finds something (ASan aborts the process,
# UBSan halts it; both print first).
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")


def host_cpu_ticks():
    """The host's CPU time counters (/proc/stat's cpu line: user, nice,
    system, idle, iowait, irq, softirq, steal, ...), () where unreadable."""
    try:
        with open("/proc/stat") as f:
            return tuple(int(x) for x in f.readline().split()[1:])
    except (OSError, ValueError):
        return ()


def stolen_pct(before, after):
    """Of the host's CPU time between two host_cpu_ticks(), the percentage a
    hypervisor took; None where the kernel does not count it."""
    total = sum(after) - sum(before)
    if len(before) <= 7 or len(after) <= 7 or total <= 0:
        return None
    return 100.0 * (after[7] - before[7]) / total


def figures(shares):
    """Shares (a dict or a list of percentages) as one short line."""
    items = shares.items() if isinstance(shares, dict) else enumerate(shares)
    return " ".join(f"{k}={v:.1f}%" for k, v in items)


class StallProbe:
    """host_stall_probe running while the block runs: stalled_pct is the
    share of that time the host could not run a real-time thread, None where
    the probe is missing or may not run at real-time priority."""

    def __init__(self, binary):
        self.binary = binary
        self.proc = None
        self.stalled_pct = None

    def __enter__(self):
        if self.binary and os.access(self.binary, os.X_OK):
            try:
                self.proc = subprocess.Popen([self.binary], stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, text=True)
            except OSError:
                self.proc = None
        return self

    def __exit__(self, *exc):
        if self.proc is None:
            return False
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=10)
            r = json.loads(out)
            if r.get("realtime") and r["elapsed_ns"] > 0:
                self.stalled_pct = 100.0 * r["stalled_ns"] / r["elapsed_ns"]
        except (subprocess.TimeoutExpired, ValueError, KeyError, TypeError, AttributeError):
            self.proc.kill()
            self.proc.wait()
        return False


_PROBE_MISSING_SAID = False


def lost_pct(stolen, stalled):
    """How much of a window the host took away: the larger of the steal it
    counted and the stall the probe saw (None where neither was measured)."""
    known = [x for x in (stolen, stalled) if x is not None]
    return max(known) if known else None


class Measured(NamedTuple):
    """What measure() saw: `shares` of the window judged (the last), the
    percentage of the host's CPU stolen in it and of its time the host
    stalled (each None: not measured), every window measured and each one's
    lost_pct(). A bound that being slow never breaks (a cap, what an attacker
    may take) must hold in every window, not only the judged one: highest()
    is what to hold it to."""
    shares: dict
    steal: float
    windows: list
    stall: float = None
    lost: list = []

    def highest(self, name):
        return max(w[name] for w in self.windows)


def measure(sample, shares, window, log=print, describe=figures, stall_probe=None):
    """shares(sample() before, sample() after) over `window` seconds, measured
    again where the host's CPU was stolen or the host stalled (above).
    stall_probe: the path of host_stall_probe (None: steal alone)."""
    global _PROBE_MISSING_SAID
    windows, lost_by_window = [], []
    for attempt in range(1, WINDOWS + 1):
        c0 = host_cpu_ticks()
        with StallProbe(stall_probe) as probe:
            before = sample()
            time.sleep(window)
            after = sample()
        result, stolen = shares(before, after), stolen_pct(c0, host_cpu_ticks())
        stalled = probe.stalled_pct
        if stall_probe and stalled is None and not _PROBE_MISSING_SAID:
            _PROBE_MISSING_SAID = True
            log(f"{os.path.basename(stall_probe)} did not run at real-time priority: the "
                f"host's stalls are not measured")
        windows.append(result)
        lost = lost_pct(stolen, stalled)
        lost_by_window.append(lost)
        if lost is None or lost <= STEAL_LIMIT_PCT:
            break
        if attempt < WINDOWS:
            log(f"window {attempt}: {describe(result)} with {lost:.1f} % of the host's CPU "
                f"time stolen or stalled: measured again")
        else:
            log(f"every window had more than {STEAL_LIMIT_PCT:g} % of the host's CPU time "
                f"stolen or stalled: the last one is judged")
    return Measured(result, stolen, windows, stalled, lost_by_window)


def sanitizer_report(text):
    """The first sanitizer report in `text` (up to 2000 characters), or None."""
    for marker in SANITIZER_REPORTS:
        if marker in text:
            at = text.index(marker)
            return text[at:at + 2000]
    return None
