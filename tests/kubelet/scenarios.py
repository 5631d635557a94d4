"""ctest scenarios for cushare-device-plugin against the test kubelet, on
fakegpu. Usage: scenarios.py <scenario> --plugin BIN --proto-dir DIR
--fakegpu-dir DIR [--fakegpu-stat BIN] [--library SO] [--samples-dir DIR].
Each scenario runs in its own temporary folder (plugin dir, run dir, sysfs,
fakegpu state) and fails with an AssertionError saying what was wrong."""

import argparse
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import cushare_regions as cr  # noqa: E402
import kubelet as kl  # noqa: E402

GI = 1 << 30
RESOURCE = "cushare.io/vgpu"


# --------------------------------------------------------------- fixtures --
class Node:
    """A simulated node: fakegpu devices, a plugin process and a test kubelet."""

    def __init__(self, args, tmp, devices="H100-80GB:80Gi:132", numa=None):
        self.args = args
        self.tmp = tmp
        self.plugin_dir = os.path.join(tmp, "device-plugins")
        self.run_dir = os.path.join(tmp, "run")
        self.sysfs = os.path.join(tmp, "sys")
        self.pod_resources = os.path.join(tmp, "pod-resources.sock")
        os.makedirs(self.plugin_dir)
        self.env = dict(os.environ)
        self.env["FAKEGPU_STATE"] = os.path.join(tmp, "fakegpu.state")
        self.env["FAKEGPU_DEVICES"] = devices
        self.env["LD_LIBRARY_PATH"] = args.fakegpu_dir + (
            ":" + self.env["LD_LIBRARY_PATH"] if self.env.get("LD_LIBRARY_PATH") else "")
        self.bus_ids = nvml_bus_ids(os.path.join(args.fakegpu_dir, "libnvidia-ml.so.1"), self.env)
        for i, bus in enumerate(self.bus_ids):
            d = os.path.join(self.sysfs, "bus/pci/devices", sysfs_name(bus))
            os.makedirs(d)
            with open(os.path.join(d, "numa_node"), "w") as f:
                f.write("%d\n" % (numa[i] if numa else -1))
        self.kubelet = kl.TestKubelet(self.plugin_dir, RESOURCE)
        self.plugin = None
        self.log_path = os.path.join(tmp, "plugin.log")

    def plugin_command(self, *extra):
        return [self.args.plugin,
                "--device-plugin-dir", self.plugin_dir,
                "--run-dir", self.run_dir,
                "--sysfs-root", self.sysfs,
                "--nvml-library", os.path.join(self.args.fakegpu_dir, "libnvidia-ml.so.1"),
                "--pod-resources-socket", self.pod_resources,
                "--library-host-path", self.args.library or "/nonexistent/libcushare.so",
                "--log-level", "debug"] + list(extra)

    def start(self, *extra):
        self.kubelet.start()
        self.log = open(self.log_path, "w")
        self.plugin = subprocess.Popen(self.plugin_command(*extra), env=self.env,
                                       stdout=self.log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 15
            while not self.kubelet.registrations:
                assert self.plugin.poll() is None, "the plugin exited with %d" % self.plugin.returncode
                assert time.monotonic() < deadline, "the plugin did not register"
                time.sleep(0.05)
            self.kubelet.wait_for_snapshot()
        except AssertionError:
            self.dump_log()
            raise
        return self

    def dump_log(self):
        if os.path.exists(self.log_path):
            with open(self.log_path) as f:
                sys.stderr.write("---- plugin log ----\n" + f.read() + "--------------------\n")

    def stop(self):
        if self.plugin and self.plugin.poll() is None:
            self.plugin.send_signal(signal.SIGTERM)
            try:
                self.plugin.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.plugin.kill()
                self.plugin.wait()
                raise AssertionError("the plugin did not stop on SIGTERM")
            assert self.plugin.returncode == 0, "plugin exited with %d" % self.plugin.returncode
        self.kubelet.stop()

    def gpu_uuids(self):
        return sorted({i.split("::")[0] for i in self.kubelet.latest().devices},
                      key=lambda u: self.uuid_order().index(u))

    def uuid_order(self):
        return nvml_uuids(os.path.join(self.args.fakegpu_dir, "libnvidia-ml.so.1"), self.env)


def sysfs_name(bus):
    bus = bus.lower()
    return bus[4:] if bus.index(":") == 8 else bus


# The NVML queries run in a child process: fakegpu's libnvidia-ml may be an
# instrumented build (scripts/test --sanitize), whose runtime must be loaded
# first (--preload-prefix), which this already-running interpreter cannot do.
NVML_QUERY = r"""
import ctypes, json, sys
class PciInfo(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]
nvml = ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0, "nvmlInit_v2 failed on fakegpu"
count = ctypes.c_uint()
assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
out = []
for i in range(count.value):
    h = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
    buf = ctypes.create_string_buffer(96)
    assert nvml.nvmlDeviceGetUUID(h, buf, 96) == 0
    info = PciInfo()
    assert nvml.nvmlDeviceGetPciInfo_v3(h, ctypes.byref(info)) == 0
    out.append({"uuid": buf.value.decode(), "bus_id": info.busId.decode()})
print(json.dumps(out))
"""
PRELOAD_PREFIX = ""  # set from --preload-prefix


def _nvml_devices(lib_path, env):
    child = dict(env)
    child.pop("LD_PRELOAD", None)
    if PRELOAD_PREFIX.strip(":"):
        child["LD_PRELOAD"] = PRELOAD_PREFIX.strip(":")
    p = subprocess.run(["/usr/bin/python3", "-c", NVML_QUERY, lib_path], env=child,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, f"NVML query on fakegpu failed: {p.stderr}"
    return json.loads(p.stdout)


def nvml_bus_ids(lib_path, env):
    return [d["bus_id"] for d in _nvml_devices(lib_path, env)]


def nvml_uuids(lib_path, env):
    return [d["uuid"] for d in _nvml_devices(lib_path, env)]


def read_limits(path):
    """The `limits` region the plugin wrote (a whole region of this layout)."""
    r = cr.Region.read(path, "limits")
    gpus = [{"uuid": g["uuid"], "memory": g["memory_limit_bytes"], "compute": g["compute_limit_pct"],
             "weight": g["weight"], "mode": g["mode"]} for g in r.gpus()]
    return {"version": r.get("header", "layout_version"), "alloc_id": r.get("header", "alloc_id"),
            "gpus": gpus}


def mounts_of(resp):
    return {m.container_path: (m.host_path, m.read_only) for m in resp.mounts}


def units_by_gpu(ids):
    out = {}
    for i in ids:
        uuid = i.split("::")[0]
        out[uuid] = out.get(uuid, 0) + 1
    return out


def expect_rpc_error(fn, fragment):
    import grpc
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        assert fragment in e.details(), "error %r does not name %r" % (e.details(), fragment)
        return e.details()
    raise AssertionError("no error for " + fragment)


# -------------------------------------------------------------- scenarios --
def scenario_register(node):
    node.start()
    k = node.kubelet
    req = k.registrations[0]
    assert req.version == "v1beta1" and req.resource_name == RESOURCE, req
    assert os.path.exists(os.path.join(node.plugin_dir, req.endpoint)), "endpoint socket missing"
    assert k.options.get_preferred_allocation_available
    assert not k.options.pre_start_required
    snap = k.latest()
    (uuid,) = node.uuid_order()
    assert sorted(snap.devices) == sorted("%s::%d" % (uuid, n) for n in range(100)), \
        "expected 100 IDs <uuid>::<n>, got %d" % len(snap.devices)
    assert all(h == "Healthy" for h, _ in snap.devices.values())
    assert all(numa == [1] for _, numa in snap.devices.values()), "NUMA node from sysfs missing"


def scenario_allocate(node):
    """Allocate 25 units and check the response and the limits file."""
    node.start()
    k = node.kubelet
    ids = k.choose(25)
    resp = k.allocate(ids)
    (uuid,) = node.uuid_order()
    env, path_of = kl.container_view(resp)
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuid, env
    assert env["CUSHARE_RUN_DIR"] == "/var/run/cushare", env
    assert env["CUSHARE_MEMORY_LIMIT"] == str(20 * GI), env
    assert env["CUSHARE_COMPUTE_LIMIT"] == "25", env
    alloc_id = resp.annotations["cushare.io/alloc-id"]
    host_dir = os.path.join(node.run_dir, "alloc", alloc_id)
    m = mounts_of(resp)
    assert m["/var/run/cushare"] == (host_dir, False), m
    assert m["/var/run/cushare/limits"] == (host_dir + "/limits", True), m
    assert m["/etc/ld.so.preload"][1], "ld.so.preload must be read-only"
    lib_container = [c for c, (h, ro) in m.items() if h == (node.args.library or
                                                            "/nonexistent/libcushare.so")]
    assert lib_container and m[lib_container[0]][1], "library mount missing or writable"
    with open(path_of("/etc/ld.so.preload")) as f:
        assert f.read().strip() == lib_container[0], "ld.so.preload must name the library"
    limits = read_limits(path_of("/var/run/cushare/limits"))
    assert limits["alloc_id"] == alloc_id
    assert limits["gpus"] == [{"uuid": uuid, "memory": 20 * GI, "compute": 25, "weight": 25,
                               "mode": 0}], limits
    assert os.path.getsize(path_of("/var/run/cushare/usage")) > 0, "usage region missing"
    return resp


def scenario_kubelet_restart(node):
    node.start()
    k = node.kubelet
    first = k.registrations[0].endpoint
    for round in (2, 3):
        k.restart()
        k.wait_for_registrations(round)
        # The plugin settles the burst of restart events into one re-register.
        time.sleep(1.0)
        last = k.registrations[-1].endpoint
        assert last == first, "endpoint changed from %s to %s" % (first, last)
        assert os.path.exists(os.path.join(node.plugin_dir, last)), "endpoint not served"
        n = len(k.snapshots)
        k.allocate(k.choose(10))  # the new endpoint works
        assert len(k.snapshots) >= n
    assert len(k.registrations) <= 4, "%d registrations for 2 restarts" % len(k.registrations)


def scenario_stream_drop(node):
    node.start()
    k = node.kubelet
    k.drop_stream()
    # Counted before the new stream opens: its first snapshot may come with
    # the re-registration itself.
    with k.cond:
        n = len(k.snapshots)
    k.wait_for_registrations(2)
    k.wait_for(lambda: len(k.snapshots) > n, what="a snapshot on the new stream")


def scenario_socket_removed(node):
    node.start()
    k = node.kubelet
    os.unlink(os.path.join(node.plugin_dir, k.registrations[0].endpoint))
    k.wait_for_registrations(2)
    assert os.path.exists(os.path.join(node.plugin_dir, k.registrations[-1].endpoint))


def scenario_xid(node):
    node.start()
    k = node.kubelet
    a, b = node.uuid_order()
    stat = [node.args.fakegpu_stat, "--inject-xid"]
    # An application XID (43) changes nothing ...
    subprocess.run(stat + ["0", "43"], env=node.env, check=True)
    # ... a critical one (79, fallen off the bus) takes every ID of GPU 1 down at once.
    n = len(k.snapshots)
    subprocess.run(stat + ["1", "79"], env=node.env, check=True)
    k.wait_for(lambda: len(k.snapshots) > n, what="a snapshot after the XID")
    snap = k.snapshots[n]
    assert snap.unhealthy() == sorted("%s::%d" % (b, i) for i in range(100)), \
        "the first snapshot after the XID must have all of GPU 1's IDs Unhealthy"
    assert len(snap.healthy()) == 100 and all(i.startswith(a) for i in snap.healthy())
    # The kubelet no longer picks them.
    ids = k.choose(50)
    assert all(i.startswith(a) for i in ids)


def scenario_packing(node, spread=False):
    # Spanning fractions of GPUs is an opt-in; scenario_straddle has the default.
    if spread:
        node.start("--packing", "spread", "--gpu-spanning", "any")
    else:
        node.start("--gpu-spanning", "any")
    k = node.kubelet
    a, b = node.uuid_order()
    r1 = k.allocate(k.choose(60))
    assert r1.envs["NVIDIA_VISIBLE_DEVICES"] == a, r1.envs  # tie: the first GPU
    r2 = k.allocate(k.choose(30))
    # best fit: 30 fits in A's 40 free units; spread: B is emptier.
    assert r2.envs["NVIDIA_VISIBLE_DEVICES"] == (b if spread else a), r2.envs
    if not spread:
        # 20 more do not fit into A's 10 left: they go to B, whole.
        r3 = k.allocate(k.choose(20))
        assert r3.envs["NVIDIA_VISIBLE_DEVICES"] == b, r3.envs
    # Larger than a GPU can hold: spans GPUs with per-GPU quotas.
    # The plugin keeps no allocation state, so a fresh view with nothing
    # allocated (as on an empty node) can ask for more than one GPU's worth.
    k2 = kl.Endpoint(k, k.resource_name)
    k2.options, k2.stub, k2.snapshots = k.options, k.stub, k.snapshots
    ids = k2.choose(150)
    assert sorted(units_by_gpu(ids).values()) == [50, 100], units_by_gpu(ids)
    resp = k2.allocate(ids)
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == a + "," + b, resp.envs
    assert "CUSHARE_MEMORY_LIMIT" not in resp.envs
    per = units_by_gpu(ids)
    limits = read_limits(os.path.join(node.run_dir, "alloc",
                                      resp.annotations["cushare.io/alloc-id"], "limits"))
    assert [g["compute"] for g in limits["gpus"]] == [per[a], per[b]], limits
    # Without GetPreferredAllocation the kubelet picks IDs anywhere: units
    # spread over both GPUs still get exact per-GPU quotas.
    k3 = kl.Endpoint(k, k.resource_name)
    k3.options, k3.stub, k3.snapshots = k.options, k.stub, k.snapshots
    ids = [a + "::%d" % n for n in range(90, 97)] + [b + "::%d" % n for n in range(3)]
    resp = k3.allocate(ids)
    limits = read_limits(os.path.join(node.run_dir, "alloc",
                                      resp.annotations["cushare.io/alloc-id"], "limits"))
    assert [(g["uuid"], g["compute"], g["memory"]) for g in limits["gpus"]] == \
        [(a, 7, 80 * GI * 7 // 100), (b, 3, 80 * GI * 3 // 100)], limits
    assert resp.envs["CUSHARE_COMPUTE_LIMIT_" + b] == "3", resp.envs
    random_ids = k3.choose(30, use_preferred=False)
    assert len(k3.allocate(random_ids).envs["NVIDIA_VISIBLE_DEVICES"]) > 0


def scenario_spread(node):
    scenario_packing(node, spread=True)


def scenario_straddle(node):
    """50 + 50 free and a request of 60: refused with a message naming both
    GPUs, never 50 % of one GPU and 10 % of the other; fitting requests land
    on one GPU, whatever the kubelet's own choice would be."""
    node.start()
    k = node.kubelet
    a, b = node.uuid_order()
    k.allocate([a + "::%d" % n for n in range(50)])
    k.allocate([b + "::%d" % n for n in range(50)])
    alloc = os.path.join(node.run_dir, "alloc")
    before = sorted(os.listdir(alloc))
    for _ in range(3):  # the kubelet fills the gap in the hint at random
        ids = k.choose(60)
        assert len(units_by_gpu(ids)) == 2, units_by_gpu(ids)
        msg = expect_rpc_error(lambda: k.allocate(ids), "request of 60 units would span 2 GPUs")
    assert a in msg and b in msg and "gpuSpanning" in msg, msg
    assert sorted(os.listdir(alloc)) == before, "a refused Allocate wrote files"
    # What fits goes onto one GPU through the hint.
    for n in (40, 10):
        ids = k.choose(n)
        assert len(units_by_gpu(ids)) == 1, units_by_gpu(ids)
        resp = k.allocate(ids)
        assert resp.envs["CUSHARE_MEMORY_LIMIT"] == str(80 * GI * n // 100), resp.envs
    # A kubelet without the hint that still picks units of two GPUs is refused.
    k2 = kl.Endpoint(k, k.resource_name)
    k2.options, k2.stub, k2.snapshots = k.options, k.stub, k.snapshots
    expect_rpc_error(lambda: k2.allocate([a + "::90", b + "::90"]), "would span 2 GPUs")
    assert node.plugin.poll() is None


def scenario_no_overcommit(node):
    """Random requests and releases through the kubelet: the live allocations'
    quotas never add up to more than a GPU's memory or 100 % of its time."""
    import random
    units = 7  # one unit is 14.29 %: rounding must not add up past 100 %
    node.start("--units-per-gpu", str(units))
    k = node.kubelet
    memory = {u: m for u, m in zip(node.uuid_order(), (80 * GI, 16 * GI))}
    rng = random.Random(1234)
    live = {}  # alloc id -> (ids, limits)
    refused = granted = 0
    for step in range(200):
        if live and rng.random() < 0.4:
            alloc_id = rng.choice(sorted(live))
            k.allocated.difference_update(live.pop(alloc_id)[0])
        else:
            free = len([i for i in k.latest().healthy() if i not in k.allocated])
            n = rng.randint(1, units)
            if n > free:
                continue
            ids = k.choose(n, use_preferred=rng.random() < 0.8)
            try:
                resp = k.allocate(ids)
            except Exception:
                refused += 1  # units of two GPUs: refused, nothing promised
                continue
            alloc_id = resp.annotations["cushare.io/alloc-id"]
            granted += 1
            live[alloc_id] = (ids, read_limits(os.path.join(node.run_dir, "alloc", alloc_id,
                                                            "limits")))
        for uuid, card in memory.items():
            gpus = [g for _, lim in live.values() for g in lim["gpus"] if g["uuid"] == uuid]
            assert sum(g["memory"] for g in gpus) <= card, (step, uuid, gpus)
            assert sum(g["compute"] for g in gpus) <= 100, (step, uuid, gpus)
    # Which allocation a release picks depends on the random ids, so the
    # count left live at the end may be anything, 0 included.
    assert refused > 0 and granted > 0, (refused, granted)


def scenario_profiles(node):
    """Two profiles on a two-GPU node: each resource registers on its own and
    advertises only its GPU with its units; an allocation gets its profile's
    ratios; random requests through both never over-commit either GPU."""
    import random
    mem = "cushare.io/vgpu-mem"
    config = os.path.join(node.tmp, "profiles.json")
    with open(config, "w") as f:
        json.dump({"profiles": [
            {"resourceName": RESOURCE, "gpus": [0], "unitsPerGpu": 10},
            {"resourceName": mem, "gpus": [1], "unitsPerGpu": 8, "computeRatio": 0.5}]}, f)
    node.start("--config", config)
    k = node.kubelet
    k.wait_for(lambda: {r.resource_name for r in k.registrations} == {RESOURCE, mem},
               what="both resources registered")
    a, b = node.uuid_order()
    whole, heavy = k.resource(RESOURCE), k.resource(mem)
    assert whole.endpoint != heavy.endpoint, "two resources on one socket"
    assert whole.wait_for_snapshot().healthy() == sorted("%s::%d" % (a, u) for u in range(10))
    assert heavy.wait_for_snapshot().healthy() == sorted("%s::%d" % (b, u) for u in range(8))
    # Memory-heavy units: 2 of 8 is a quarter of the memory and 12 % of the time.
    resp = heavy.allocate(heavy.choose(2))
    lim = read_limits(os.path.join(node.run_dir, "alloc", resp.annotations["cushare.io/alloc-id"],
                                   "limits"))
    assert [(g["uuid"], g["memory"], g["compute"]) for g in lim["gpus"]] == \
        [(b, 80 * GI // 4, 12)], lim
    # A unit of the other profile's GPU is not this resource's.
    expect_rpc_error(lambda: heavy.allocate([a + "::0"]), a + "::0")
    heavy.allocated.clear()

    cards = {a: 80 * GI, b: 80 * GI}
    rng = random.Random(99)
    live = {}  # alloc id -> (endpoint, ids, limits)
    both_live = 0  # steps at which both resources had allocations
    for step in range(200):
        if live and rng.random() < 0.4:
            alloc_id = rng.choice(sorted(live))
            e, ids, _ = live.pop(alloc_id)
            e.allocated.difference_update(ids)
        else:
            e, units = rng.choice([(whole, 10), (heavy, 8)])
            free = len([i for i in e.latest().healthy() if i not in e.allocated])
            n = rng.randint(1, units)
            if n > free:
                continue
            ids = e.choose(n, use_preferred=rng.random() < 0.8)
            resp = e.allocate(ids)
            alloc_id = resp.annotations["cushare.io/alloc-id"]
            live[alloc_id] = (e, ids, read_limits(os.path.join(node.run_dir, "alloc", alloc_id,
                                                                "limits")))
        for uuid, card in cards.items():
            gpus = [g for _, _, lim in live.values() for g in lim["gpus"] if g["uuid"] == uuid]
            assert sum(g["memory"] for g in gpus) <= card, (step, uuid, gpus)
            assert sum(g["compute"] for g in gpus) <= 100, (step, uuid, gpus)
        both_live += {e.resource_name for e, _, _ in live.values()} == {RESOURCE, mem}
    # The walk exercised the two resources side by side (not one after the other).
    assert both_live >= 10, both_live


def scenario_bad_ids(node):
    node.start()
    k = node.kubelet
    (uuid,) = node.uuid_order()
    expect_rpc_error(lambda: k.allocate(["garbage"]), "'garbage'")
    expect_rpc_error(lambda: k.allocate(["GPU-00000000-dead-beef-0000-000000000000::3"]),
                     "GPU-00000000-dead-beef-0000-000000000000::3")
    expect_rpc_error(lambda: k.allocate([uuid + "::1", uuid + "::100"]), uuid + "::100")
    expect_rpc_error(lambda: k.allocate([]), "no device IDs")
    assert not os.listdir(os.path.join(node.run_dir, "alloc")), "a refused Allocate wrote files"
    assert node.plugin.poll() is None, "the plugin died on bad input"


def scenario_bad_config(node):
    def run(*extra, config=None):
        cmd = node.plugin_command(*extra)
        if config is not None:
            path = os.path.join(node.tmp, "config.json")
            with open(path, "w") as f:
                f.write(config)
            cmd += ["--config", path]
        p = subprocess.run(cmd, env=node.env, capture_output=True, text=True, timeout=10)
        return p.returncode, p.stderr

    for config, fragment in [('{"unitsPerGpu": 0}', "unitsPerGpu"),
                             ('{"packing": "tight"}', "tight"),
                             ('{"unitsPerGPU": 10}', "unknown config key 'unitsPerGPU'"),
                             ('{"memoryRatio": "half"}', "memoryRatio"),
                             ("{not json", "not valid JSON"),
                             ('{"profiles": [{"resourceName": "a.io/x", "gpus": [0]},'
                              ' {"resourceName": "a.io/y", "gpus": [0]}]}', "two profiles"),
                             # Valid on its own; this node has one GPU.
                             ('{"profiles": [{"resourceName": "a.io/x", "gpus": [1]}]}',
                              "GPU '1'")]:
        rc, err = run(config=config)
        assert rc == 2 and fragment in err, "config %s: rc=%d stderr=%r" % (config, rc, err)
    rc, err = run("--compute-mode", "turbo")
    assert rc == 2 and "turbo" in err, (rc, err)
    rc, err = run("--config", "/nonexistent/plugin.json")
    assert rc == 2 and "/nonexistent/plugin.json" in err, (rc, err)
    # Flags override the file, and a good file passes --check-config.
    rc, err = run("--check-config", "--packing", "spread", config='{"packing": "tight"}')
    assert rc == 2, "the file's bad value must still be reported"
    p = subprocess.run(node.plugin_command("--check-config", "--units-per-gpu", "10"),
                       env=node.env, capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and "10 units" in p.stdout, (p.returncode, p.stdout, p.stderr)
    assert not os.listdir(node.plugin_dir), "a bad config must not serve anything"


def scenario_idempotent(node):
    node.start()
    k = node.kubelet
    ids = k.choose(25)
    r1 = k.allocate(ids)
    limits = os.path.join(node.run_dir, "alloc", r1.annotations["cushare.io/alloc-id"], "limits")
    inode = os.stat(limits).st_ino
    r2 = k.allocate(list(reversed(ids)))
    assert r1.SerializeToString(deterministic=True) == r2.SerializeToString(deterministic=True), \
        "a repeated Allocate must give the same response"
    assert os.stat(limits).st_ino == inode, "a repeated Allocate must not recreate the region"
    assert len(os.listdir(os.path.join(node.run_dir, "alloc"))) == 1
    # Concurrent Allocates of disjoint sets (several containers admitted at once).
    free = [i for i in k.latest().healthy() if i not in ids]
    sets = [free[i * 10:(i + 1) * 10] for i in range(6)]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        resps = list(pool.map(k.allocate, sets))
    alloc_ids = {r.annotations["cushare.io/alloc-id"] for r in resps}
    assert len(alloc_ids) == 6, alloc_ids
    for r in resps:
        lim = read_limits(os.path.join(node.run_dir, "alloc",
                                       r.annotations["cushare.io/alloc-id"], "limits"))
        assert lim["gpus"][0]["compute"] == 10, lim


def scenario_cleanup(node):
    node.kubelet.serve_pod_resources(node.pod_resources)
    node.start("--cleanup-interval-seconds", "1", "--cleanup-min-age-seconds", "0",
               "--orphan-age-seconds", "0")
    k = node.kubelet
    keep_ids, gone_ids = k.choose(10), None
    # Listed as running before its Allocate: with a minimum age of 0 a pass
    # between the Allocate and the listing would find it gone.
    with k.cond:
        k.pods = {"running": [keep_ids]}
    keep = k.allocate(keep_ids).annotations["cushare.io/alloc-id"]
    gone_ids = k.choose(10)
    gone = k.allocate(gone_ids).annotations["cushare.io/alloc-id"]
    alloc = os.path.join(node.run_dir, "alloc")
    deadline = time.monotonic() + 8
    while os.path.exists(os.path.join(alloc, gone)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(os.path.join(alloc, gone)), "the gone pod's folder stayed"
    assert os.path.exists(os.path.join(alloc, keep, "limits")), "a running pod's folder was removed"
    # Without PodResources the kubelet checkpoint decides.
    k.pod_resources_server.stop(0).wait()
    k.pod_resources_server = None
    if os.path.exists(node.pod_resources):
        os.unlink(node.pod_resources)
    checkpoint = {"Data": {"PodDeviceEntries": [
        {"PodUID": "u1", "ContainerName": "c", "ResourceName": RESOURCE,
         "DeviceIDs": {"-1": keep_ids}, "AllocResp": ""}], "RegisteredDevices": {}},
        "Checksum": 0}
    with open(os.path.join(node.plugin_dir, "kubelet_internal_checkpoint"), "w") as f:
        json.dump(checkpoint, f)
    third_ids = k.choose(10)
    third = k.allocate(third_ids).annotations["cushare.io/alloc-id"]
    deadline = time.monotonic() + 8
    while os.path.exists(os.path.join(alloc, third)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(os.path.join(alloc, third)), "checkpoint rule did not remove"
    assert os.path.exists(os.path.join(alloc, keep, "limits")), "checkpoint rule removed a live one"


SCENARIOS = {
    "register": (scenario_register, {"numa": [1]}),
    "allocate": (scenario_allocate, {}),
    "kubelet_restart": (scenario_kubelet_restart, {}),
    "stream_drop": (scenario_stream_drop, {}),
    "socket_removed": (scenario_socket_removed, {}),
    "xid": (scenario_xid, {"devices": "H100-80GB:80Gi:132;T4:16Gi:40"}),
    "packing": (scenario_packing, {"devices": "H100-80GB:80Gi:132;H100-80GB:80Gi:132",
                                   "numa": [0, 0]}),
    "spread": (scenario_spread, {"devices": "H100-80GB:80Gi:132;H100-80GB:80Gi:132"}),
    "straddle": (scenario_straddle, {"devices": "H100-80GB:80Gi:132;H100-80GB:80Gi:132"}),
    "no_overcommit": (scenario_no_overcommit, {"devices": "H100-80GB:80Gi:132;T4:16Gi:40"}),
    "profiles": (scenario_profiles, {"devices": "H100-80GB:80Gi:132;H100-80GB:80Gi:132"}),
    "bad_ids": (scenario_bad_ids, {}),
    "bad_config": (scenario_bad_config, {}),
    "idempotent": (scenario_idempotent, {}),
    "cleanup": (scenario_cleanup, {}),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario",
                   choices=sorted(SCENARIOS) + ["end_to_end_memory", "end_to_end_compute",
                                           "end_to_end_metrics"])
    p.add_argument("--plugin", required=True)
    p.add_argument("--proto-dir", required=True)
    p.add_argument("--fakegpu-dir", required=True)
    p.add_argument("--fakegpu-stat")
    p.add_argument("--library")
    p.add_argument("--samples-dir")
    p.add_argument("--cushared")
    p.add_argument("--preload-prefix", default="")
    args = p.parse_args()
    global PRELOAD_PREFIX
    PRELOAD_PREFIX = args.preload_prefix
    for name in ("plugin", "proto_dir", "fakegpu_dir", "fakegpu_stat", "library", "samples_dir",
                 "cushared"):
        if getattr(args, name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    with tempfile.TemporaryDirectory(prefix="cushare-kubelet-") as tmp:
        kl.generate_stubs(args.proto_dir, os.path.join(tmp, "stubs"))
        if args.scenario.startswith("end_to_end_"):
            import end_to_end
            fn = getattr(end_to_end, "scenario_" + args.scenario[len("end_to_end_"):])
            kwargs = end_to_end.NODE
        else:
            fn, kwargs = SCENARIOS[args.scenario]
        node = Node(args, tmp, **kwargs)
        try:
            fn(node)
        except BaseException:
            node.dump_log()
            raise
        finally:
            node.stop()
    print("scenario %s: OK" % args.scenario)


if __name__ == "__main__":
    main()
