#!/usr/bin/python3
"""ctest realprog.*: Driver-API programs (realprog_*.cpp beside this file) that
drive the driver as NVIDIA's CUDA 13 runtime does, on device code the toolkit's
nvcc built, each run under the shim with a quota on a fresh fakegpu node.

A case passes when:
  - the program exits 0: every driver result it checks was the expected one
    (it ends with a JSON line: launches that succeeded, allocations refused);
  - the quota held: the shim refused each of those allocations (the ledger's
    `oom_refusals`; fakegpu's device has room for them, so the refusal is the
    shim's), and fakegpu's device memory high-water mark while the program
    ran stayed within the quota and above what the program must have held
    (its context and its largest set of live buffers);
  - the launch gate saw every launch (the ledger's `launches` equals the
    program's count);
  - nothing stayed behind: the device's memory and the ledger are empty after
    the program exits.

Usage: CUSHARE_NVCC=<nvcc the build used> realprog.py <case> --build-dir B
"""
import functools
import os
import subprocess
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_here, "..", "..", "lib"))
import cushare_regions as cr  # noqa: E402
import cushare_test as ct  # noqa: E402

MI = ct.MI
QUOTA = ct.GI
OVERHEAD = 300 * MI  # FAKEGPU_CONTEXT_OVERHEAD of the node

# case: (images from nvcc, device memory the program holds at once besides its context)
CASES = {
    "lazy_library": (["kernels.fatbin"], 3 * 256 * 1024),
    "primary_reset": (["kernels.fatbin"], QUOTA // 2),
    "vmm_vector_add": (["kernels.fatbin"], 3 * 4 * MI),
    "jit_link": (["link_main.ptx", "link_lib.ptx"], 2 * 16 * 1024),
    "graph_capture": (["kernels.fatbin"], 16 * MI),
}


def run_case(case, b):
    names, holds = CASES[case]
    nvcc = os.environ.get("CUSHARE_NVCC", "")
    if not os.path.isfile(nvcc):
        ct.skip_or_fail(f"the CUDA toolkit's nvcc was not found when the build was configured "
                        f"(CUSHARE_NVCC={nvcc!r}): no device code to run")
    images = [os.path.join(b.dir, "tests", "integration", "realprog", n) for n in names]
    for path in images:
        ct.check(os.path.isfile(path), f"{path} is missing: build the target realprog_images")
    program = b.tool("realprog_" + case)
    with ct.Node(b, overhead="300Mi") as node:
        env = dict(node.env)
        env.update({
            "LD_PRELOAD": b.preload_prefix + b.lib,
            "CUSHARE_RUN_DIR": node.run_dir,
            "CUSHARE_MEMORY_LIMIT": "1Gi",
            "FAKEGPU_HOST_BACKING": "64Mi",  # the copies hold real bytes
        })
        node.reset_peak()
        try:
            p = subprocess.run([program, str(QUOTA), *images], env=env, capture_output=True,
                               text=True, timeout=45)
        except subprocess.TimeoutExpired as e:
            raise ct.Failure(f"{case} did not finish: {e.stdout} {e.stderr}")
        ct.check(p.returncode == 0, f"{case} exited {p.returncode}\n{p.stdout}{p.stderr}")
        got = ct.last_json(p.stdout)
        ct.check(got is not None, f"{case} printed no result\n{p.stdout}{p.stderr}")
        print(f"{case}: {got}")

        dev = node.device()
        node.return_gone_charges()
        usage = cr.Region.read(os.path.join(node.run_dir, "usage"), "usage")
        gpu = {k: usage.get("gpus", 0, k) for k in ("launches", "oom_refusals", "used_bytes")}
        peak = dev["memory_used_peak"]
        print(f"device peak {peak / MI:.1f} MiB, quota {QUOTA / MI:.0f} MiB; ledger: "
              f"{gpu['launches']} launches, {gpu['oom_refusals']} refusals")
        ct.check(got["oom_refusals"] >= 1, f"{case} tried no allocation past the quota")
        ct.check(gpu["oom_refusals"] == got["oom_refusals"],
                 f"the shim refused {gpu['oom_refusals']} allocations, the program saw "
                 f"{got['oom_refusals']} refused")
        ct.check(peak <= QUOTA, f"device memory peaked at {peak} bytes, over the quota {QUOTA}")
        ct.check(peak >= OVERHEAD + holds,
                 f"device memory peaked at {peak} bytes, below the context and buffers "
                 f"({OVERHEAD + holds}): the program did not run on this node's device")
        ct.check(got["launches"] > 0, f"{case} launched nothing")
        ct.check(gpu["launches"] == got["launches"],
                 f"the gate counted {gpu['launches']} launches, the program made "
                 f"{got['launches']}")
        ct.check(dev["memory_used"] == 0, f"{dev['memory_used']} bytes left on the device")
        ct.check(gpu["used_bytes"] == 0, f"{gpu['used_bytes']} bytes left in the ledger")
        live = usage.slots(states=(cr.SLOT_ACTIVE,))
        ct.check(not live, f"slots still active after the program exited: {live}")


if __name__ == "__main__":
    sys.exit(ct.run_cases({case: functools.partial(run_case, case) for case in CASES}))
