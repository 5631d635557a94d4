"""Check 3: nvidia-smi (and NVML read by any program) under the shim shows the
quota as the card's total memory."""

import re
import subprocess

from ..detect import nvidia_smi
from ..procs import Deadline
from ..report import CheckResult
from ..suite_context import MiB, Suite
from .common import QUOTA, QUOTA_TEXT, gib

_TABLE_MEMORY = re.compile(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB")


def _run(cmd, env, d: Deadline, log_path: str):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=d.cap(30),
                       start_new_session=True)
    with open(log_path, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout + p.stderr + f"[exit {p.returncode}]\n")
    return p


def nvidia_smi_view(suite: Suite, r: CheckResult, d: Deadline) -> None:
    smi = nvidia_smi()
    if smi is None:
        r.skip("nvidia-smi not found on PATH")
        return
    run_dir = suite.new_dir("standalone", "smi")
    env = suite.tenant_env(run_dir, memory=QUOTA_TEXT)
    log = f"{suite.log_dir}/nvidia-smi.log"
    target = ["-i", suite.gpu["uuid"]] if suite.gpu.get("uuid") else []
    q = _run([smi, "--query-gpu=memory.total,memory.used,memory.free",
              "--format=csv,noheader,nounits"] + target, env, d, log)
    fields = [x.strip() for x in q.stdout.strip().splitlines()[0].split(",")] if q.stdout.strip() else []
    total_mib = int(fields[0]) if fields and fields[0].isdigit() else None
    r.details["query"] = q.stdout.strip() or q.stderr.strip()
    r.measure("nvidia-smi --query-gpu memory.total", f"= {QUOTA // MiB} MiB", total_mib,
              None if q.returncode != 0 else total_mib == QUOTA // MiB, unit="MiB",
              note="" if q.returncode == 0 else f"exit {q.returncode}: {q.stderr.strip()[:160]}")
    if len(fields) == 3 and all(f.isdigit() for f in fields):
        used, free = int(fields[1]), int(fields[2])
        r.measure("used + free = total", f"{total_mib} MiB (±1)", used + free,
                  abs(used + free - total_mib) <= 1, unit="MiB")
    t = _run([smi] + target, env, d, log)
    m = _TABLE_MEMORY.search(t.stdout)
    r.measure("nvidia-smi table memory column total", f"{QUOTA // MiB}MiB",
              m.group(2) + "MiB" if m else None,
              None if t.returncode != 0 else bool(m) and int(m.group(2)) == QUOTA // MiB)


def nvml_view(suite: Suite, r: CheckResult, d: Deadline) -> None:
    """NVML as a program under the shim reads it (no CUDA call first, like
    nvidia-smi): runs everywhere, fakegpu included."""
    run_dir = suite.new_dir("standalone", "nvml")
    args = ["nvml"] + (["--uuid", suite.gpu["uuid"]] if suite.gpu.get("uuid") else [])
    w = suite.probe("probe-nvml", args, suite.tenant_env(run_dir, memory=QUOTA_TEXT))
    got = w.wait_event("nvml", d, 30)
    w.stop()
    r.details["nvml"] = {k: v for k, v in got.items() if not k.startswith("_")}
    r.measure("nvmlDeviceGetMemoryInfo total", f"= {gib(QUOTA)}", gib(got["total"]),
              got["status"] == 0 and got["total"] == QUOTA)
    r.measure("used + free = total", gib(got["total"]), gib(got["used"] + got["free"]),
              got["used"] + got["free"] == got["total"])
    v2 = got.get("v2")
    if v2 is not None:
        r.measure("nvmlDeviceGetMemoryInfo_v2 total", f"= {gib(QUOTA)}", gib(v2["total"]),
                  v2["status"] == 0 and v2["total"] == QUOTA)
