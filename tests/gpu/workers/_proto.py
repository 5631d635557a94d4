"""The worker side of the suite's line protocol (see cushare_gpu/procs.py):
JSON messages on stdout prefixed with "@@cushare ", commands on stdin.
Workers run under the framework's Python, so this file keeps to what every
Python 3.8+ has."""

import json
import sys
import time

PREFIX = "@@cushare "


def emit(event, **fields):
    fields["event"] = event
    sys.stdout.write(PREFIX + json.dumps(fields, default=str) + "\n")
    sys.stdout.flush()


def wait_for(word):
    """Blocks until `word` arrives on stdin; end of input means release."""
    for line in sys.stdin:
        line = line.strip()
        if line == word:
            return True
        if line == "release":
            return False
    return False


class Progress:
    """Emits {"t": monotonic, "n": completed} at most every `interval` s."""

    def __init__(self, interval=0.1):
        self.interval = interval
        self.next = 0.0

    def report(self, n, force=False):
        now = time.monotonic()
        if force or now >= self.next:
            self.next = now + self.interval
            emit("progress", t=now, n=n)


def fill(alloc_one, oom_types, chunk_sizes):
    """Allocates with alloc_one(nbytes) in decreasing chunk sizes until each is
    refused; returns (blocks, held bytes, first refusal)."""
    blocks, held, first = [], 0, None
    for size in chunk_sizes:
        while True:
            try:
                blocks.append(alloc_one(size))
                held += size
            except oom_types as e:
                if first is None:
                    first = e
                break
    return blocks, held, first
