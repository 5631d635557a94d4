#!/usr/bin/python3
"""Runs inside a hostile tenant's container (security.hostile_usage): flips
the size of its own usage file and writes random bytes into it.

Usage: vandal.py USAGE_FILE SECONDS
"""
import os
import random
import sys
import time


def main():
    path, seconds = sys.argv[1], float(sys.argv[2])
    rng = random.Random(7)
    end = time.monotonic() + seconds
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        while time.monotonic() < end:
            op = rng.randrange(4)
            if op == 0:
                f.truncate(size + rng.choice([1, 4096, 1 << 20]))
            elif op == 1:
                f.truncate(rng.randrange(size))
            elif op == 2:
                f.truncate(size)
            else:
                f.seek(rng.randrange(size))
                f.write(os.urandom(rng.randrange(1, 512)))
            f.flush()
            time.sleep(0.001)
        f.truncate(size)


if __name__ == "__main__":
    main()
