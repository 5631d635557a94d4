"""End to end: the kubelet allocates 25 units of an 80 GiB card, then the
samples run with exactly the returned environment and paths (each container
path translated to the host path its mount names, since a test cannot bind
mount): libcushare.so comes from the generated ld.so.preload, the quotas from
the allocation's `limits` file. The memory quota must be 25 % of the card and
the GPU time of a capped tenant at most its 25 % share."""

import json
import os
import subprocess

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


def run_json(cmd, env, timeout=30):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert lines, "%s printed no JSON (rc %d): %s" % (cmd[0], p.returncode, p.stderr[-2000:])
    return p.returncode, json.loads(lines[-1]), p.stderr


def scenario(node):
    node.start("--compute-mode", "capped")
    k = node.kubelet
    resp = k.allocate(k.choose(25))
    env = container_process_env(node, resp)
    samples = node.args.samples_dir

    # Memory: the quota is 25 % of the card, and the view matches it.
    rc, probe, err = run_json([os.path.join(samples, "alloc_probe"), "--step", "256Mi"], env)
    quota = 20 * GI
    assert probe["bytes"] <= quota, "obtained %d bytes over a %d quota" % (probe["bytes"], quota)
    assert probe["bytes"] >= quota - 2 * GI, "obtained only %d of %d" % (probe["bytes"], quota)
    assert probe["before"]["total"] == quota, "cuMemGetInfo total %d" % probe["before"]["total"]
    assert probe["result"] == "CUDA_ERROR_OUT_OF_MEMORY", probe

    # Compute: a capped tenant alone on the GPU gets at most its share.
    rc, spin, err = run_json([os.path.join(samples, "spin_worker"), "--kernel-us", "2000",
                              "--seconds", "2"], env)
    assert rc == 0 and spin["errors"] == 0, (spin, err[-2000:])
    stat = subprocess.run([node.args.fakegpu_stat, "--json"], env=node.env, capture_output=True,
                          text=True, check=True)
    busy = sum(p["busy_ns"] for d in json.loads(stat.stdout)["devices"] for p in d["processes"]
               if p["pid"] == spin["pid"])
    share = busy / (spin["seconds"] * 1e9)
    assert 0.15 <= share <= 0.30, "capped 25 %% tenant used %.1f %% of the GPU" % (100 * share)
