"""Check 9: the CUDA runtime's driver lookups as the card's driver and the
installed runtime make them. PyTorch runs under the shim with trace logging;
every cuGetProcAddress request it logged is compared with the list fakegpu is
tested against (tests/data/cudart13-proc-lookups.txt), and written to
logs/cudart-lookups.txt: the rows to commit when a runtime changes
(docs/fakegpu.md, "The CUDA runtime's lookups")."""

import os
import re

from ..procs import Deadline
from ..report import CheckResult
from ..suite_context import Suite
from .common import QUOTA_TEXT

_LOOKUP = re.compile(r"cuGetProcAddress(?:_v2)? lookup\t([^\t]+)\t(\d+)\t(\S+)")


def _rows(lines):
    return {m.groups() for m in map(_LOOKUP.search, lines) if m}


def _tested_rows(repo: str):
    path = os.path.join(repo, "tests", "data", "cudart13-proc-lookups.txt")
    with open(path) as f:
        return {tuple(line.rstrip("\n").split("\t")[:3]) for line in f
                if line.strip() and not line.startswith("#")}


def run(suite: Suite, r: CheckResult, d: Deadline) -> None:
    fw = suite.framework("torch")
    if not fw.get("available"):
        r.skip(f"torch unavailable: {fw.get('reason')}")
        return
    r.framework = f"torch {fw.get('version')} ({fw.get('python')})"
    log = os.path.join(suite.log_dir, "lookups-trace.log")
    env = suite.tenant_env(suite.new_dir("standalone", "lookups"), memory=QUOTA_TEXT,
                           extra={"CUSHARE_LOG_LEVEL": "trace", "CUSHARE_LOG_FILE": log})
    w = suite.py_worker("torch-lookups", "torch", "torch_lookups.py", [], env)
    done = w.wait_event("done", d, 90)
    w.stop()
    with open(log, errors="replace") as f:
        seen = _rows(f)
    tested = _tested_rows(suite.repo)
    with open(os.path.join(suite.log_dir, "cudart-lookups.txt"), "w") as f:
        for row in sorted(seen):
            f.write("\t".join(row) + "\n")
    new = sorted(seen - tested)
    r.details["done"] = {k: v for k, v in done.items() if not k.startswith("_")}
    r.details["not_in_tested_list"] = ["\t".join(x) for x in new]
    r.measure("cuGetProcAddress requests of PyTorch's CUDA stack seen by the shim", "> 50",
              len(seen), len(seen) > 50, note="logs/cudart-lookups.txt")
    r.measure("requests not in tests/data/cudart13-proc-lookups.txt", "informational", len(new),
              None, note=", ".join(f"{n}@{v}" for n, v, _ in new[:12]))
