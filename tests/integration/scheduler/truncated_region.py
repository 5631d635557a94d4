#!/usr/bin/python3
"""ctest daemon.truncated_region: a tenant truncates its allocation's `usage`
file (every process of an allocation may write it) while cushared has it
mapped. The daemon must survive (the mapping guard turns its faults into zero
pages), drop that allocation with an error naming it, and keep serving the
others: a tenant of another allocation keeps its lease and runs.

Usage: truncated_region.py --build-dir BUILD
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import cushare_test as ct  # noqa: E402


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    args = ap.parse_args()
    b = os.path.abspath(args.build_dir)
    ctl = os.path.join(b, "bin", "cusharectl")
    with tempfile.TemporaryDirectory(prefix="cushare-trunc-") as tmp:
        run = os.path.join(tmp, "run")
        env = ct.fakegpu_env(b, tmp)
        for alloc in ("victim", "other"):
            subprocess.run([ctl, "--run-dir", run, "create", alloc, "--memory-limit", "2Gi",
                            "--compute-limit", "50", "--mode", "burst"],
                           env=env, check=True, capture_output=True)
        log_path = os.path.join(tmp, "cushared.log")
        try:
            daemon = ct.start_daemon(os.path.join(b, "bin", "cushared"), run, env=env,
                                     log_path=log_path)
        except ct.Failure as e:
            fail(str(e))
        tenant = None
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and open(log_path).read().count("discovered") < 2:
                time.sleep(0.05)
            if open(log_path).read().count("discovered") < 2:
                fail(f"the daemon did not discover both allocations:\n{open(log_path).read()}")
            # A tenant of the other allocation, running through the whole test.
            tenv = dict(env, LD_PRELOAD=os.environ.get("CUSHARE_PRELOAD", ""),
                        CUSHARE_RUN_DIR=os.path.join(run, "alloc", "other"))
            tenant = subprocess.Popen([os.path.join(b, "samples", "spin_worker"), "--kernel-us",
                                       "1000", "--seconds", "4"], env=tenv,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
            os.truncate(os.path.join(run, "alloc", "victim", "usage"), 0)
            time.sleep(1.5)
            if not daemon.alive():
                fail(f"cushared died ({daemon.returncode}) after the truncation:\n"
                     f"{open(log_path).read()}")
            text = open(log_path).read()
            if "victim" not in text or "truncated" not in text:
                fail(f"no error naming the truncated allocation:\n{text}")
            st = subprocess.run([ctl, "--run-dir", run, "--json", "status"], env=env,
                                capture_output=True, text=True, timeout=30)
            # The other allocation is shown; the broken one is reported, and
            # makes the run a failure (exit 1), as any unreadable allocation.
            if st.returncode != 1 or '"other"' not in st.stdout or "victim" not in st.stderr:
                fail(f"cusharectl status after the truncation: {st.returncode}\n{st.stdout}"
                     f"\n{st.stderr}")
            out, err = tenant.communicate(timeout=30)
            if tenant.returncode != 0:
                fail(f"the other allocation's tenant failed ({tenant.returncode}): {err}")
            tenant = None
            if not daemon.alive():
                fail(f"cushared died ({daemon.returncode}):\n{open(log_path).read()}")
            print("ok: daemon alive, victim dropped, the other tenant ran")
        finally:
            if tenant is not None and tenant.poll() is None:
                tenant.kill()
                tenant.wait()
            daemon.kill()


if __name__ == "__main__":
    main()
