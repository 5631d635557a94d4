#!/usr/bin/python3
"""What a library needs from the process it is loaded into (ctest portable.abi).

For each library: its NEEDED entries must all be glibc's own libraries, and
every symbol version it requires (readelf's .gnu.version_r) must be a GLIBC_
version no newer than the floor: no GLIBCXX_, CXXABI_ or GCC_ versions (the C++
runtime and libgcc are linked in) and nothing from glibc after the floor.
Prints one line per library, e.g.

  libcushare.so: NEEDED libc.so.6 libdl.so.2 ...; highest GLIBC_2.25 (floor 2.28)

Usage: abi_check.py --floor 2.28 LIB...   (exit 1 naming every violation)
"""
import argparse
import re
import subprocess
import sys

GLIBC_LIBRARIES = {
    "libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libm.so.6",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
}


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True,
                          text=True).stdout


def version_key(v):
    return tuple(int(x) for x in v.split("."))


def check(path, floor):
    problems = []
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf("-d", path))
    for lib in needed:
        if lib not in GLIBC_LIBRARIES:
            problems.append(f"needs {lib}, which is not part of glibc")
    required = {}  # version name -> file it is required from
    current_file = None
    for line in readelf("-V", path).splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            current_file = m.group(1)
        m = re.search(r"Name: (\S+)", line)
        if m and current_file:
            required[m.group(1)] = current_file
    glibc = []
    for name, lib in sorted(required.items()):
        m = re.fullmatch(r"GLIBC_(\d+(?:\.\d+)*)", name)
        if not m:
            if name != "GLIBC_PRIVATE":
                problems.append(f"requires {name} from {lib}")
            else:
                problems.append(f"requires GLIBC_PRIVATE from {lib} (glibc-internal ABI)")
            continue
        glibc.append(m.group(1))
        if version_key(m.group(1)) > version_key(floor):
            problems.append(f"requires {name} from {lib}, newer than the floor GLIBC_{floor}")
    highest = max(glibc, key=version_key) if glibc else "none"
    name = path.rsplit("/", 1)[-1]
    print(f"{name}: NEEDED {' '.join(needed)}; highest GLIBC_{highest} (floor {floor})")
    for p in problems:
        print(f"  {name}: {p}")
    return not problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--floor", required=True)
    ap.add_argument("libs", nargs="+")
    a = ap.parse_args()
    ok = all([check(lib, a.floor) for lib in a.libs])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
