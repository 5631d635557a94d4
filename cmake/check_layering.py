#!/usr/bin/env python3
"""Fails when a source file includes a part of the tree it must not depend on.

The layers, lowest first (docs/architecture.md, "Layering"): shm/ is the node
contract everything builds on; node/ is the read model of a node's regions
shared by the daemon, the CLI and the plugin; the binaries (shim/, scheduler/,
tools/, plugin/) sit on those and never on each other. Inside the shim, the
routing (interpose/) and the exported functions (hooks/) are on top; driver/
and devices/ at the bottom include nothing of the shim above them. Inside the
plugin, core/ is pure (no gRPC, NVML or files: nothing of node/), node/ sits on
it and main.cpp on both. deploy/ is packaging and holds no C++.

The build runs it (the `layering` target, which the shipped binaries depend
on), so such an include fails `cmake --build`; ctest style.layering runs it too.

Usage: check_layering.py REPO_ROOT [STAMP]   (STAMP: touched when it passes)
"""
import pathlib
import re
import subprocess
import sys

# part -> the parts its files may include ("" is a file's own part).
ALLOWED = {
    "shm": {"shm"},
    "portable": {"portable"},
    "node": {"node", "shm"},
    "scheduler": {"scheduler", "node", "shm"},
    "tools": {"tools", "node", "shm"},
    "plugin": {"plugin", "plugin/node", "plugin/core", "node", "shm"},
    "plugin/node": {"plugin/node", "plugin/core", "node", "shm"},
    "plugin/core": {"plugin/core", "shm"},
    "samples": {"samples"},
    "shim/driver": {"shim/driver", "shm"},
    "shim/devices": {"shim/devices", "shim/driver", "shm"},
    "shim/process": {"shim/process", "shim/accounting", "shim/gate", "shim/devices",
                     "shim/driver", "shm"},
    "shim/accounting": {"shim/accounting", "shim/process", "shim/devices", "shim/driver", "shm"},
    "shim/gate": {"shim/gate", "shim/accounting", "shim/process", "shim/devices", "shim/driver",
                  "shm"},
    "shim/hooks": {"shim/hooks", "shim/gate", "shim/accounting", "shim/process", "shim/devices",
                   "shim/driver", "shm"},
    "shim/interpose": {"shim/interpose", "shim/hooks", "shim/gate", "shim/accounting",
                       "shim/process", "shim/devices", "shim/driver", "shm"},
}
SOURCE = re.compile(r"\.(c|cc|cpp|h|hpp|inc)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def part_of(path: str) -> str | None:
    """The part a repository path belongs to (None: not layered, e.g. tests/)."""
    p = pathlib.PurePosixPath(path).parts
    if not p:
        return None
    if p[0] in ("shim", "plugin") and len(p) > 2:
        return f"{p[0]}/{p[1]}"
    return p[0] if p[0] in ALLOWED else None


def source_files(root: pathlib.Path) -> list[str]:
    """The repository's files: git's list (tracked and new, not ignored), or,
    outside a git checkout (a source tarball), every file of the layered parts."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard"],
                                capture_output=True, text=True, check=True)
        return listed.stdout.split()
    except (OSError, subprocess.CalledProcessError):
        tops = {part.split("/")[0] for part in ALLOWED}
        return [str(f.relative_to(root)) for top in sorted(tops) if (root / top).is_dir()
                for f in (root / top).rglob("*") if f.is_file()]


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    files = source_files(root)
    bad = []
    for f in files:
        if not SOURCE.search(f):
            continue
        part = part_of(f)
        if part is None or part not in ALLOWED:
            continue
        try:
            text = (root / f).read_text(errors="replace")
        except OSError:
            continue
        for inc in INCLUDE.findall(text):
            target = part_of(inc)
            if target is None:
                continue  # a header beside it, a generated one, or a library's
            if target not in ALLOWED[part]:
                bad.append(f"{f}: includes {inc} ({part} may not depend on {target})")
    if bad:
        print("upward or sideways includes:\n  " + "\n  ".join(bad))
        return 1
    print(f"layering: {len(files)} files checked, no part includes one above it")
    if len(sys.argv) > 2:
        pathlib.Path(sys.argv[2]).touch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
