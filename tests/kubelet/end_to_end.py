"""End to end: the kubelet allocates 25 units of an 80 GiB card, then the
samples run with exactly the returned environment and paths (each container
path translated to the host path its mount names, since a test cannot bind
mount): libcushare.so comes from the generated ld.so.preload, the quotas from
the allocation's `limits` file. The memory quota must be 25 % of the card and
the GPU time of a capped tenant at most its 25 % share (two scenarios:
end_to_end_memory, end_to_end_compute). end_to_end_metrics: cushared labels
the allocation's series with the pod the kubelet's PodResources names."""

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.request

import cushare_test as ct  # tests/lib, on the path from scenarios.py
import kubelet as kl

GI = 1 << 30
NODE = {"devices": "H100-80GB:80Gi:132"}


def container_process_env(node, resp):
    env, path_of = kl.container_view(resp)
    with open(path_of("/etc/ld.so.preload")) as f:
        preloaded = [path_of(line.strip()) for line in f if line.strip()]
    run = dict(node.env)  # fakegpu's state and libraries stand in for the driver
    run.update(env)
    run["CUSHARE_RUN_DIR"] = path_of(env["CUSHARE_RUN_DIR"])
    run["LD_PRELOAD"] = node.args.preload_prefix + ":".join(preloaded)
    return run


def run_json(cmd, env, timeout=20):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert lines, "%s printed no JSON (rc %d): %s" % (cmd[0], p.returncode, p.stderr[-2000:])
    return p.returncode, json.loads(lines[-1]), p.stderr


def allocate_quarter(node, *plugin_args):
    node.start(*plugin_args)
    k = node.kubelet
    resp = k.allocate(k.choose(25))
    return container_process_env(node, resp)


def scenario_memory(node):
    """Memory: the quota is 25 % of the card, and the view matches it."""
    env = allocate_quarter(node)
    probe_cmd = [os.path.join(node.args.samples_dir, "alloc_probe"), "--step", "256Mi"]
    rc, probe, err = run_json(probe_cmd, env)
    quota = 20 * GI
    assert probe["bytes"] <= quota, "obtained %d bytes over a %d quota" % (probe["bytes"], quota)
    assert probe["bytes"] >= quota - 2 * GI, "obtained only %d of %d" % (probe["bytes"], quota)
    assert probe["before"]["total"] == quota, "cuMemGetInfo total %d" % probe["before"]["total"]
    assert probe["result"] == "CUDA_ERROR_OUT_OF_MEMORY", probe
    # Without the library the same program sees the whole card: the quota
    # really came from the allocation.
    bare = dict(env)
    del bare["LD_PRELOAD"]
    rc, probe, err = run_json(probe_cmd + ["--max", str(quota + GI)], bare)
    assert probe["bytes"] > quota, "without the shim the probe should pass the quota"


def scenario_compute(node):
    """Compute, with the node daemon as in a real deployment (the DaemonSet
    runs it next to the plugin): it grants the GPU-time leases."""
    env = allocate_quarter(node, "--compute-mode", "capped")
    with cushared(node):
        check_compute_share(node, env, node.args.samples_dir)


@contextlib.contextmanager
def cushared(node, *extra):
    """The node daemon, as the DaemonSet runs it next to the plugin; its log
    is printed when the block fails."""
    assert node.args.cushared, "--cushared is required"
    daemon = ct.start_daemon(node.args.cushared, node.run_dir, extra, env=node.env,
                             log_path=os.path.join(node.tmp, "cushared.log"))
    try:
        yield daemon
    except BaseException:
        print("---- cushared log ----\n" + daemon.log())
        raise
    finally:
        daemon.stop()


def check_compute_share(node, env, samples):
    # Compute: a capped tenant alone on the GPU gets at most its share of the
    # GPU time that passed (fakegpu's ground truth, device-wide busy time).
    busy_before = device_busy_ns(node)
    rc, spin, err = run_json([os.path.join(samples, "spin_worker"), "--kernel-us", "2000",
                              "--seconds", "2"], env)
    busy = device_busy_ns(node) - busy_before
    assert rc == 0 and spin["errors"] == 0, (spin, err[-2000:])
    share = busy / (spin["seconds"] * 1e9)
    assert 0.10 <= share <= 0.30, "capped 25 %% tenant used %.1f %% of the GPU" % (100 * share)


def device_busy_ns(node):
    stat = subprocess.run([node.args.fakegpu_stat, "--json"], env=node.env, capture_output=True,
                          text=True, check=True)
    return json.loads(stat.stdout)["devices"][0]["busy_ns"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scenario_metrics(node):
    """Pod identity reaches the metrics through the plugin's node-owned
    RUN/identity folder, never through the tenant's allocation folder."""
    node.kubelet.serve_pod_resources(node.pod_resources)
    node.start("--pod-identity-interval-seconds", "1")
    k = node.kubelet
    ids = k.choose(25)
    alloc_id = k.allocate(ids).annotations["cushare.io/alloc-id"]
    (uuid,) = node.uuid_order()
    # The tenant names itself after another pod in the folder it can write.
    with open(os.path.join(node.run_dir, "alloc", alloc_id, "identity"), "w") as f:
        f.write('{"pod": "victim", "namespace": "kube-system", "container": "x"}')
    with k.cond:
        k.pods = {"trainer": [ids]}
    identity = os.path.join(node.run_dir, "identity", alloc_id)
    deadline = time.monotonic() + 10
    while not os.path.exists(identity) and time.monotonic() < deadline:
        time.sleep(0.1)
    with open(identity) as f:
        assert json.load(f) == {"pod": "trainer", "namespace": "default", "container": "c0"}
    assert os.stat(identity).st_mode & 0o777 == 0o644
    port = free_port()
    labels = ('{allocation="%s",gpu="0",UUID="%s",pod="trainer",namespace="default",'
              'container="c0"}' % (alloc_id, uuid))
    want = "cushare_memory_quota_bytes%s %d" % (labels, 20 * GI)
    text = ""
    with cushared(node, "--metrics-addr", "127.0.0.1:%d" % port):
        deadline = time.monotonic() + 15
        while want not in text and time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                              timeout=2).read().decode()
            except OSError:
                continue
        assert want in text, "no %r in:\n%s" % (want, text[-3000:])
        assert "victim" not in text
        mode_lines = [line for line in text.splitlines() if "mode=" in line]
        assert mode_lines == ["cushare_compute_mode_info%s,mode=\"burst\"} 1" % labels[:-1]], \
            mode_lines
        # The pod goes: its identity file goes with it.
        with k.cond:
            k.pods = {}
        deadline = time.monotonic() + 10
        while os.path.exists(identity) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(identity), "the gone pod's identity stayed"
