"""An allocation's published drain mark (usage, `drained_ns` of GPU 0)
sampled while a process runs, and what stream_cover_probe's run says of the
samples (ctest shim.stream_cover and check 13 of the GPU suite).

Import with:  sys.path.insert(0, <repo>/tests/lib); import drain_marks
"""
import os
import threading
import time

import cushare_regions as cr


class DrainSampler:
    """(CLOCK_MONOTONIC when read, drained_ns) pairs of an allocation folder's
    usage region, every 0.5 ms from when the region is whole until the block
    ends."""

    def __init__(self, folder):
        self.path = os.path.join(folder, "usage")
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        usage = None
        while not self._stop.is_set():
            if usage is None:
                try:
                    usage = cr.Region.map(self.path, "usage")
                    usage.validate()
                except (OSError, ValueError, cr.RegionError):
                    usage = None  # not made, or not whole, yet
            if usage is not None:
                drained = usage.get("gpus", 0, "drained_ns")
                self.samples.append((time.clock_gettime_ns(time.CLOCK_MONOTONIC), drained))
            time.sleep(0.0005)


def early_marks(out, samples):
    """The samples taken before stream_cover_probe's long kernel could have
    ended (its submission plus its duration) whose drain mark reaches its
    submission: each claims the kernel done while it still ran."""
    ends_after = out["long_before_ns"] + out["long_us"] * 1000
    return [(at, drained) for at, drained in samples
            if at < ends_after and drained >= out["long_after_ns"]]
