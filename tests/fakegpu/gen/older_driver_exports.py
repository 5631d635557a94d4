#!/usr/bin/python3
"""Writes the linker version script of a fakegpu library that stands for an
older driver: the same exports as the current one, less the functions that
driver did not have yet (made local, so neither the dynamic linker nor dlsym
finds them).

Usage: older_driver_exports.py OUT.map --global PATTERN... [--hide NAME...]
           [--proc-table proc_table.inc --newer-than VERSION]

--newer-than hides every symbol whose oldest entry in the cuGetProcAddress
table (FAKEGPU_PROC lines: base, PFN version, per-thread, symbol) is newer
than VERSION (1000*major + 10*minor): exactly what cuGetProcAddress of a
driver of that version (FAKEGPU_DRIVER_VERSION) does not hand out either.
"""
import argparse
import re


def newer_symbols(proc_table, version):
    oldest = {}
    with open(proc_table) as f:
        for m in re.finditer(r'FAKEGPU_PROC\("\w+", (\d+), \d, (\w+)\)', f.read()):
            v, symbol = int(m.group(1)), m.group(2)
            oldest[symbol] = min(v, oldest.get(symbol, v))
    return sorted(s for s, v in oldest.items() if v > version)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--global", dest="globals", action="append", required=True)
    p.add_argument("--hide", action="append", default=[])
    p.add_argument("--proc-table")
    p.add_argument("--newer-than", type=int)
    a = p.parse_args()
    hidden = set(a.hide)
    if a.proc_table:
        hidden.update(newer_symbols(a.proc_table, a.newer_than))
    # An exact name binds before a wildcard, so `local: NAME` wins over `global: cu*`.
    lines = ["{", "  global:"] + [f"    {g};" for g in a.globals]
    lines += ["  local:"] + [f"    {h};" for h in sorted(hidden)] + ["    *;", "};"]
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
