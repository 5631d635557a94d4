"""The suite's entry point: detect, run the checks under time budgets, clean
up, write report.json and report.md. Invoked by tests/gpu/run.sh."""

import argparse
import datetime
import os
import platform
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback

from . import detect, report
from .checks import select
from .procs import Deadline, TimeUp, WorkerFailed
from .suite_context import MiB, Suite

CLEANUP_RESERVE_S = 15.0
QUICK_CHECK_BUDGET_S = 20.0


class Interrupted(Exception):
    pass


def _parse(argv):
    p = argparse.ArgumentParser(prog="tests/gpu/run.sh", description=__doc__)
    p.add_argument("--out", required=True, help="folder for report.json, report.md, logs/")
    p.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    p.add_argument("--build-dir", required=True)
    p.add_argument("--only", default="", help="comma-separated check ids")
    p.add_argument("--quick", action="store_true", help="short windows (ctest under fakegpu)")
    p.add_argument("--budget", type=float, default=420.0, help="seconds for the whole suite")
    p.add_argument("--libcuda", default="libcuda.so.1")
    p.add_argument("--libnvml", default="libnvidia-ml.so.1")
    p.add_argument("--fakegpu-stat", default="", help="fakegpu-stat: marks a simulated GPU")
    p.add_argument("--shim", default="", help="libcushare.so (default BUILD/lib/libcushare.so)")
    p.add_argument("--preload-prefix", default=os.environ.get("CUSHARE_PRELOAD_PREFIX", ""))
    p.add_argument("--fatal", default="", help="report this fatal error (a failed build...) and run nothing")
    p.add_argument("--build-info", default="", help="one line on how the build was obtained")
    p.add_argument("--work-dir", default="", help="scratch folder (default: a fresh temp folder)")
    return p.parse_args(argv)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _install_signal_handlers():
    def handler(signum, _frame):
        raise Interrupted(f"interrupted by signal {signum}")
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, handler)


def _run_check(suite: Suite, check, budget_end: float) -> report.CheckResult:
    r = report.CheckResult(check.id, check.title)
    left = budget_end - time.monotonic()
    if left < 5:
        return r.skip("suite time budget exhausted before this check")
    missing = suite.missing_binaries(need_daemon=check.needs_daemon)
    if missing:
        return r.skip(missing)
    # Quick runs (ctest on fakegpu) have short windows: a check that needs
    # longer is stuck, and finding that out must not take minutes.
    budget = min(check.budget_s, QUICK_CHECK_BUDGET_S if suite.quick else check.budget_s, left)
    d = Deadline(budget)
    first_worker = len(suite.procs.workers)
    # Watchdog: a check that overstays its budget has its processes killed,
    # which unblocks whatever it waits on.
    timer = threading.Timer(budget + 5.0, lambda: suite.procs.stop_all(
        suite.procs.workers[first_worker:]))
    timer.daemon = True
    timer.start()
    t0 = time.monotonic()
    try:
        check.run(suite, r, d)
        r.settle()
    except TimeUp as e:
        r.error(f"timed out ({budget:.0f} s budget): {e}")
    except WorkerFailed as e:
        r.error(str(e))
    except Interrupted:
        r.error("interrupted")
        raise
    except Exception as e:  # a bug in the check must not lose the report
        r.error(f"{type(e).__name__}: {e}")
        r.details["traceback"] = traceback.format_exc()
    finally:
        timer.cancel()
        suite.procs.stop_all(suite.procs.workers[first_worker:])
        r.duration_s = time.monotonic() - t0
    return r


def _cleanup(suite: Suite, baseline_used):
    leftovers = suite.procs.cleanup()
    ours = {w.pid for w in suite.procs.workers}
    info = {"processes_started": len(suite.procs.workers), "leftover_pids": leftovers}
    # The driver frees a dead process's memory asynchronously: wait a little.
    end = time.monotonic() + 10.0
    while True:
        procs = suite.nvml_processes()
        mem = suite.nvml_memory()
        still = sorted(ours & set(procs or {}))
        grown = None if mem is None or baseline_used is None else mem["used"] - baseline_used
        if (not still and (grown is None or grown <= 64 * MiB)) or time.monotonic() > end:
            break
        time.sleep(0.25)
    info.update(gpu_processes_left=still, gpu_memory_used_before=baseline_used,
                gpu_memory_used_after=None if mem is None else mem["used"])
    info["ok"] = not leftovers and not still and (grown is None or grown <= 64 * MiB)
    return info


def main(argv=None) -> int:
    args = _parse(argv if argv is not None else sys.argv[1:])
    started, t_start = _now(), time.monotonic()
    budget_end = t_start + args.budget - CLEANUP_RESERVE_S
    os.makedirs(args.out, exist_ok=True)
    _install_signal_handlers()
    checks = select(args.only)
    meta = {"started": started, "host": {"hostname": socket.gethostname(),
                                         "kernel": platform.release(),
                                         "python": sys.version.split()[0]},
            "build": {"dir": os.path.abspath(args.build_dir), "info": args.build_info,
                      "error": args.fatal if args.fatal.startswith("build") else None},
            "options": {"only": args.only, "quick": args.quick, "budget_s": args.budget}}
    results = []
    suite = None
    baseline = None
    fatal = None
    own_work_dir = not args.work_dir
    try:
        gpu = detect.detect_gpu(args.libcuda, args.libnvml)
        gpu["simulated"] = bool(args.fakegpu_stat)
        meta["gpu"] = gpu
        meta["nvidia_smi"] = detect.nvidia_smi()
        frameworks = detect.detect_frameworks() if gpu.get("available") else {}
        meta["frameworks"] = frameworks
        if args.fatal:
            fatal = args.fatal
            results = [report.CheckResult(c.id, c.title).skip(fatal) for c in checks]
        elif not gpu.get("available"):
            results = [report.CheckResult(c.id, c.title).skip(gpu.get("reason", "no GPU"))
                       for c in checks]
        else:
            if own_work_dir:
                args.work_dir = tempfile.mkdtemp(prefix="cushare-gpu-")
            suite = Suite(args, gpu, frameworks)
            baseline = (suite.nvml_memory() or {}).get("used")
            for c in checks:
                res = _run_check(suite, c, budget_end)
                results.append(res)
                print(f"[{res.status:5}] {c.id:3} {c.title} ({res.duration_s:.2f} s)"
                      + (f": {res.reason}" if res.reason else ""), flush=True)
    except Interrupted as e:
        fatal = str(e)
        done = {r.id for r in results}
        results += [report.CheckResult(c.id, c.title).skip(fatal) for c in checks if c.id not in done]
    finally:
        if suite is not None:
            meta["cleanup"] = _cleanup(suite, baseline)
            if meta["cleanup"]["ok"] is False:
                fatal = fatal or "cleanup: processes or GPU memory left behind"
        if own_work_dir and args.work_dir:
            import shutil
            shutil.rmtree(args.work_dir, ignore_errors=True)
        meta["finished"] = _now()
        meta["duration_s"] = round(time.monotonic() - t_start, 2)
        meta["fatal"] = fatal
        rep = report.build_report(meta, results)
        if fatal and rep["summary"]["verdict"] != "fail":
            rep["summary"]["verdict"] = "error"
        report.write_report(args.out, rep)
    print(f"verdict: {rep['summary']['verdict']} -> {os.path.join(args.out, 'report.md')}", flush=True)
    if args.fatal:
        return 2
    return 1 if rep["summary"]["verdict"] == "error" else report.exit_code(rep["summary"])


if __name__ == "__main__":
    sys.exit(main())
