#!/usr/bin/python3
"""Multi-process fakegpu scenarios (ctest fakegpu.*).

Usage: scenarios.py <scenario> --stat PATH --alloc-probe PATH --spin-worker PATH
Each run gets its own temporary FAKEGPU_STATE. Shares and busy fractions come
from fakegpu-stat's ground truth over an exact simulated window (time_ns).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ARGS = None


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def env_with(extra):
    env = dict(os.environ)
    env.update(extra)
    return env


def stat(env):
    out = subprocess.run([ARGS.stat, "--json"], env=env, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        fail("fakegpu-stat failed: " + out.stderr)
    return json.loads(out.stdout)


def proc_busy(snapshot, pid, device=0):
    for p in snapshot["devices"][device]["processes"]:
        if p["pid"] == pid:
            return p["busy_ns"]
    return 0


def proc_memory(snapshot, pid, device=0):
    for p in snapshot["devices"][device]["processes"]:
        if p["pid"] == pid:
            return p["memory_used"]
    return 0


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    fail("timed out waiting for " + what)


def read_json_line(proc, timeout=30):
    line = proc.stdout.readline()
    if not line:
        fail("no JSON line from pid %d: %s" % (proc.pid, proc.stderr.read() if proc.stderr else ""))
    return json.loads(line)


SPAWNED = []  # killed at the end, whatever the scenario left running


def spawn(cmd, env):
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    SPAWNED.append(p)
    return p


def finish(proc, timeout=30):
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        fail("%s exited %d: %s" % (proc.args, proc.returncode, err))
    return json.loads(out.strip().splitlines()[-1])


def stop(proc):
    """Ends a worker started with LONG_SECONDS the way its --seconds would
    (spin_worker stops on SIGTERM): its exit status and last line still count."""
    if proc.poll() is not None:
        fail("%s exited %d before the measurement ended: %s" %
             (proc.args, proc.returncode, proc.stderr.read()))
    proc.send_signal(signal.SIGTERM)
    return finish(proc)


# Workers run until stop(): one starting late must still be running through
# the whole window measured.
LONG_SECONDS = "120"


# ---------------------------------------------------------------- scenarios

def two_processes_share(env, workers=(["--kernel-us", "500"], ["--kernel-us", "500"])):
    """Two busy contexts on one device: 50 % +- 3 each, device >= 97 % busy."""
    a, b = [spawn([ARGS.spin_worker, "--seconds", LONG_SECONDS] + w, env) for w in workers]
    wait_until(lambda: all(proc_busy(stat(env), p.pid) > 0 for p in (a, b)), 10, "both workers to run")
    first = stat(env)
    time.sleep(2.5)
    second = stat(env)
    window = second["time_ns"] - first["time_ns"]
    device = second["devices"][0]["busy_ns"] - first["devices"][0]["busy_ns"]
    shares = [(proc_busy(second, p.pid) - proc_busy(first, p.pid)) / device for p in (a, b)]
    busy = device / window
    print("window %.3f s, device busy %.2f %%, shares %.2f %% / %.2f %%" %
          (window / 1e9, 100 * busy, 100 * shares[0], 100 * shares[1]))
    for p in (a, b):
        stop(p)
    if busy < 0.97:
        fail("device busy %.2f %% < 97 %%" % (100 * busy))
    for s in shares:
        if abs(s - 0.5) > 0.03:
            fail("share %.2f %% not within 50 +- 3 %%" % (100 * s))


def unequal_kernels_share(env):
    """Time slicing preempts long kernels: 200 us vs 20 ms kernels still split 50/50."""
    # The 20 ms worker keeps 16 kernels (320 ms) queued so that it drains quickly at the end
    # (a full 1024-deep queue of 20 ms kernels would take 20 s to drain).
    two_processes_share(env, workers=(["--kernel-us", "200"], ["--kernel-us", "20000", "--inflight", "16"]))


def lone_process_busy(env):
    """A lone context runs back to back; event timings match kernel durations."""
    worker = spawn([ARGS.spin_worker, "--kernel-us", "200", "--seconds", LONG_SECONDS], env)
    wait_until(lambda: proc_busy(stat(env), worker.pid) > 0, 10, "the worker to run")
    first = stat(env)
    time.sleep(1.5)
    second = stat(env)
    window = second["time_ns"] - first["time_ns"]
    busy = (second["devices"][0]["busy_ns"] - first["devices"][0]["busy_ns"]) / window
    mine = (proc_busy(second, worker.pid) - proc_busy(first, worker.pid)) / window
    print("lone worker: device busy %.2f %%, its share %.2f %%" % (100 * busy, 100 * mine))
    stop(worker)
    if busy < 0.97 or mine < 0.97:
        fail("lone process not back to back: %.2f %%" % (100 * busy))

    # 40 kernels of 10 ms: events measure 400 ms (+-5 %), the sync waits for them.
    timed = finish(spawn([ARGS.spin_worker, "--kernel-us", "10000", "--count", "40", "--events"], env))
    print("timed run:", json.dumps(timed))
    if abs(timed["gpu_ms"] - 400.0) > 20.0:
        fail("event time %.3f ms, expected 400 ms +- 5 %%" % timed["gpu_ms"])
    if timed["seconds"] < 0.38:
        fail("synchronize returned before the simulated kernels finished (%.3f s)" % timed["seconds"])
    # Per-kernel: 200 short kernels of 1 ms each take 200 ms of device time.
    before = stat(env)
    short = finish(spawn([ARGS.spin_worker, "--kernel-us", "1000", "--count", "200", "--events"], env))
    after = stat(env)
    device = after["devices"][0]["busy_ns"] - before["devices"][0]["busy_ns"]
    print("200 x 1 ms: device busy %.3f ms, events %.3f ms" % (device / 1e6, short["gpu_ms"]))
    if abs(device / 1e6 - 200.0) > 10.0 or abs(short["gpu_ms"] - 200.0) > 10.0:
        fail("kernel durations off by more than 5 %")


def capacity_concurrent(env):
    """Two concurrent allocators get exactly capacity minus two context overheads."""
    tmp = env["FAKEGPU_TEST_TMP"]
    go = os.path.join(tmp, "go")
    probes = []
    for i in range(2):
        ready = os.path.join(tmp, "ready%d" % i)
        probes.append((ready, spawn([ARGS.alloc_probe, "--step", "64Mi", "--hold-seconds", "3", "--ready-file", ready,
                                     "--go-file", go], env)))
    wait_until(lambda: all(os.path.exists(r) for r, _ in probes), 10, "both contexts")
    open(go, "w").close()
    results = [read_json_line(p) for _, p in probes]
    snapshot = stat(env)
    total = 16 * 2**30
    overhead = 256 * 2**20
    obtained = sum(r["bytes"] for r in results)
    print("obtained %d + %d = %d bytes of %d (overhead %d each); device used %d" %
          (results[0]["bytes"], results[1]["bytes"], obtained, total, overhead,
           snapshot["devices"][0]["memory_used"]))
    for _, p in probes:
        p.communicate(timeout=30)
    if obtained != total - 2 * overhead:
        fail("expected exactly %d bytes" % (total - 2 * overhead))
    if any(r["result"] != "CUDA_ERROR_OUT_OF_MEMORY" for r in results):
        fail("a probe did not end with CUDA_ERROR_OUT_OF_MEMORY")
    if snapshot["devices"][0]["memory_used"] != total:
        fail("device not full while both held their memory")
    if any(r["before"]["total"] != total or r["before"]["device_total"] != total for r in results):
        fail("cuMemGetInfo/cuDeviceTotalMem total wrong")
    after = stat(env)
    if after["devices"][0]["memory_used"] != 0:
        fail("memory not returned after both exited: %d" % after["devices"][0]["memory_used"])
    if after["devices"][0]["memory_used_peak"] != total:
        fail("the high-water mark did not keep the full device: %d" % after["devices"][0]["memory_used_peak"])
    subprocess.run([ARGS.stat, "--reset-peak"], env=env, check=True)
    if stat(env)["devices"][0]["memory_used_peak"] != 0:
        fail("--reset-peak did not restart the high-water mark from the memory in use")


def killed_process_memory_returns(env):
    """kill -9 of a client frees its context and allocations, as the driver does."""
    probe = spawn([ARGS.alloc_probe, "--step", "256Mi", "--max", "1Gi", "--hold-seconds", "60"], env)
    result = read_json_line(probe)
    overhead = 300 * 2**20
    held = stat(env)
    mem = proc_memory(held, probe.pid)
    print("probe holds %d bytes (allocations %d + context %d)" % (mem, result["bytes"], overhead))
    if mem != result["bytes"] + overhead or result["bytes"] != 2**30:
        fail("per-process memory should be allocations + context overhead")
    probe.send_signal(signal.SIGKILL)
    probe.wait()
    after = wait_until(lambda: (lambda s: s if s["devices"][0]["memory_used"] == 0 else None)(stat(env)), 5,
                       "the killed process's memory to return")
    if proc_memory(after, probe.pid) != 0:
        fail("killed process still holds memory")
    # A new process can use the whole device again.
    full = finish(spawn([ARGS.alloc_probe, "--step", "1Gi"], env))
    if full["bytes"] != 80 * 2**30 - 2**30:  # 80Gi minus its context, in 1Gi steps (79 fit)
        fail("capacity not fully available after the kill: %d" % full["bytes"])


def bad_configuration(env):
    """Every knob rejects a malformed value with a clear error; cuInit fails."""
    cases = [("FAKEGPU_DEVICES", "H100:80Gi"), ("FAKEGPU_DEVICES", "H100:80Gx:132"), ("FAKEGPU_DEVICES", "H100:80Gi:0"),
             ("FAKEGPU_CONTEXT_OVERHEAD", "300MB"), ("FAKEGPU_TIMESLICE_US", "abc"), ("FAKEGPU_TIMESLICE_US", "0"),
             ("FAKEGPU_KERNEL_NS", "-1"), ("FAKEGPU_DRIVER_VERSION", "13001"), ("FAKEGPU_COPY_BW", "0"),
             ("FAKEGPU_HOST_BACKING", "lots"), ("FAKEGPU_QUEUE_DEPTH", "5000"),
             ("FAKEGPU_FREED_HANDLES", "sometimes")]
    for name, value in cases:
        out = subprocess.run([ARGS.alloc_probe, "--max", "1Mi", "--step", "1Mi"], env=env_with({name: value}),
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 or "cuInit failed" not in out.stderr or name not in out.stderr:
            fail("%s=%s: expected a cuInit failure naming the variable, got rc=%d stderr=%r" %
                 (name, value, out.returncode, out.stderr))
        print("%s=%s -> %s" % (name, value, out.stderr.strip().splitlines()[0]))
    ok = subprocess.run([ARGS.alloc_probe, "--max", "1Mi", "--step", "1Mi"],
                        env=env_with({"FAKEGPU_DEVICES": "A100:40Gi:108", "FAKEGPU_STATE": env["FAKEGPU_STATE"] + "2"}),
                        capture_output=True, text=True, timeout=30)
    if ok.returncode != 0 or json.loads(ok.stdout)["before"]["total"] != 40 * 2**30:
        fail("a valid FAKEGPU_DEVICES was not honoured: " + ok.stdout + ok.stderr)


def api_matrix(env):
    """alloc_probe works through every allocation API and sees the same capacity."""
    for api in ["alloc", "pitch", "managed", "async", "pool", "vmm", "array"]:
        r = finish(spawn([ARGS.alloc_probe, "--api", api, "--step", "1Gi"], env))
        print(api, r["bytes"], r["result"], r["after"]["free"])
        if r["result"] != "CUDA_ERROR_OUT_OF_MEMORY" or r["bytes"] != 79 * 2**30:
            fail("%s: expected 79 GiB then OUT_OF_MEMORY, got %s" % (api, json.dumps(r)))
        if r["after"]["free"] != r["before"]["free"] - r["bytes"]:
            fail("%s: cuMemGetInfo free did not drop by the bytes obtained" % api)
    if stat(env)["devices"][0]["memory_used"] != 0:
        fail("memory left behind after the probes exited")


def visible_devices(env):
    """CUDA_VISIBLE_DEVICES selects devices by index, UUID or UUID prefix, like the driver."""
    env = dict(env, FAKEGPU_DEVICES="H100-80GB:80Gi:132;T4:16Gi:40")
    probe = [ARGS.alloc_probe, "--step", "1Gi", "--max", "1Gi"]
    uuid1 = stat(env)["devices"][1]["uuid"]

    def run(visible, extra=()):
        return subprocess.run(probe + list(extra), env=dict(env, CUDA_VISIBLE_DEVICES=visible), capture_output=True,
                              text=True, timeout=30)

    for visible in ["1", uuid1, uuid1[:8], "1,7,0"]:
        out = run(visible)
        if out.returncode != 0 or json.loads(out.stdout)["before"]["device_total"] != 16 * 2**30:
            fail("CUDA_VISIBLE_DEVICES=%s should show only the T4 as device 0: %s %s" % (visible, out.stdout, out.stderr))
    # Parsing stops at the first invalid entry: "1,7,0" has one device.
    if run("1,7,0", ["--device", "1"]).returncode == 0:
        fail("CUDA_VISIBLE_DEVICES=1,7,0 exposed more than one device")
    both = run("1,0", ["--device", "1"])
    if both.returncode != 0 or json.loads(both.stdout)["before"]["device_total"] != 80 * 2**30:
        fail("CUDA_VISIBLE_DEVICES=1,0 should make the H100 device 1: " + both.stdout + both.stderr)
    for visible in ["", "7", "GPU-", "MIG-0"]:
        out = run(visible)
        if out.returncode == 0 or "CUDA_ERROR_NO_DEVICE" not in out.stderr:
            fail("CUDA_VISIBLE_DEVICES=%r should leave no device: %s" % (visible, out.stderr))
    # The charge lands on the physical device.
    held = spawn(probe + ["--hold-seconds", "30"], dict(env, CUDA_VISIBLE_DEVICES="1"))
    read_json_line(held)
    snapshot = stat(env)
    on_t4 = proc_memory(snapshot, held.pid, device=1)
    held.kill()
    held.wait()
    if on_t4 != 2**30 + 300 * 2**20 or proc_memory(snapshot, held.pid, device=0) != 0:
        fail("memory of ordinal 0 under CUDA_VISIBLE_DEVICES=1 not charged to physical device 1")
    print("CUDA_VISIBLE_DEVICES: indices, UUID, prefix, stop-at-invalid and empty all behave")


# A program that destroys an event and a stream, then uses each (ctypes on
# fakegpu's libcuda.so.1, found through the test's library path): with argv[1]
# "event" by their destroy calls, the event first; "stream" the stream only;
# "context" both with the context they were made in.
USE_AFTER_DESTROY = r"""
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
dev, ctx, stream, event = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
how = sys.argv[1]
assert cu.cuInit(0) == 0
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
if how == "context":
    assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
else:
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuStreamCreate(ctypes.byref(stream), 1) == 0
assert cu.cuEventCreate(ctypes.byref(event), 0) == 0
if how == "context":
    assert cu.cuCtxDestroy_v2(ctx) == 0
if how == "event":
    assert cu.cuEventDestroy_v2(event) == 0
if how != "stream":
    print("event", cu.cuEventQuery(event), flush=True)
if how != "context":
    assert cu.cuStreamDestroy_v2(stream) == 0
print("stream", cu.cuStreamQuery(stream), flush=True)
"""


def freed_handles(env):
    """A destroyed stream or event handle gets CUDA_ERROR_INVALID_HANDLE; with
    FAKEGPU_FREED_HANDLES=abort one ends the process, naming it, whether its
    destroy call or its context's end destroyed it."""
    def run(policy, how):
        # An instrumented libcuda.so.1 needs its sanitizer's runtime loaded first.
        child = dict(env, FAKEGPU_FREED_HANDLES=policy)
        if ARGS.preload_prefix:
            child["LD_PRELOAD"] = ARGS.preload_prefix.rstrip(":")
        return subprocess.run([sys.executable, "-c", USE_AFTER_DESTROY, how], env=child,
                              capture_output=True, text=True, timeout=30)
    for how in ["event", "context"]:
        lenient = run("error", how)
        if lenient.returncode != 0 or lenient.stdout.split() != ["event", "400", "stream", "400"]:
            fail("FAKEGPU_FREED_HANDLES=error (%s): expected CUDA_ERROR_INVALID_HANDLE (400) for both, "
                 "got rc=%d %r %r" % (how, lenient.returncode, lenient.stdout, lenient.stderr))
    for how, kind in [("event", "event"), ("stream", "stream"), ("context", "event")]:
        strict = run("abort", how)
        if (strict.returncode != -signal.SIGABRT or "a destroyed %s" % kind not in strict.stderr or
                strict.stdout.strip()):
            fail("FAKEGPU_FREED_HANDLES=abort (%s): expected an abort at the destroyed %s, got rc=%d %r %r" %
                 (how, kind, strict.returncode, strict.stdout, strict.stderr))
    print("destroyed streams and events, by their calls or with their context: an error by default, "
          "an abort when asked")


SCENARIOS = {f.__name__: f for f in [two_processes_share, unequal_kernels_share, lone_process_busy, capacity_concurrent,
                                     killed_process_memory_returns, bad_configuration, api_matrix,
                                     visible_devices, freed_handles]}


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--stat", required=True)
    parser.add_argument("--alloc-probe", required=True)
    parser.add_argument("--spin-worker", required=True)
    parser.add_argument("--preload-prefix", default="",
                        help="what LD_PRELOAD must start with (a sanitizer's runtime) for a program "
                             "that loads the instrumented libcuda.so.1 itself")
    ARGS = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fakegpu-test-") as tmp:
        extra = {"FAKEGPU_STATE": os.path.join(tmp, "state"), "FAKEGPU_TEST_TMP": tmp}
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        if ARGS.scenario == "capacity_concurrent":
            extra.update({"FAKEGPU_DEVICES": "T4:16Gi:40", "FAKEGPU_CONTEXT_OVERHEAD": "256Mi"})
        for knob in ["FAKEGPU_DEVICES", "FAKEGPU_CONTEXT_OVERHEAD", "FAKEGPU_TIMESLICE_US", "FAKEGPU_KERNEL_NS",
                     "FAKEGPU_DRIVER_VERSION", "FAKEGPU_COPY_BW", "FAKEGPU_HOST_BACKING", "FAKEGPU_QUEUE_DEPTH",
                     "FAKEGPU_FREED_HANDLES"]:
            if knob not in extra:
                os.environ.pop(knob, None)
        try:
            SCENARIOS[ARGS.scenario](env_with(extra))
        finally:
            for p in SPAWNED:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    print("PASS")


if __name__ == "__main__":
    main()
