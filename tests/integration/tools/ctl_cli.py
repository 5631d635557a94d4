#!/usr/bin/python3
"""cusharectl end to end: one ctest per case (`ctl_cli.py CASE --ctl PATH ...`).

Each case works in its own temp folder; every figure it checks was written
by the case itself (ctl_write_scenario or `cusharectl create`).
"""
import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

ARGS = None


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def ctl(*argv, env=None, expect=None):
    """Runs cusharectl; returns (rc, stdout, stderr)."""
    full_env = dict(os.environ)
    full_env.pop("CUSHARE_RUN_DIR", None)
    full_env.update(env or {})
    proc = subprocess.run([ARGS.ctl, *argv], capture_output=True, text=True, env=full_env, timeout=30)
    if expect is not None and proc.returncode != expect:
        fail(f"cusharectl {' '.join(argv)}: exit {proc.returncode}, expected {expect}\n"
             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc.returncode, proc.stdout, proc.stderr


def one_line_error(stderr, *needles):
    lines = [l for l in stderr.splitlines() if l.strip()]
    check(len(lines) == 1, f"expected one stderr line, got {len(lines)}: {stderr!r}")
    check(lines[0].startswith("cusharectl: "), f"stderr does not start with 'cusharectl: ': {lines[0]!r}")
    for needle in needles:
        check(needle in lines[0], f"stderr lacks {needle!r}: {lines[0]!r}")


def scenario(tmp, *flags):
    run = os.path.join(tmp, "run")
    subprocess.run([ARGS.write_scenario, run, *flags], check=True, timeout=30)
    return run


def validator(definition):
    import jsonschema
    with open(ARGS.schema) as f:
        schema = json.load(f)
    sub = {"$schema": schema["$schema"], "$ref": "#/$defs/" + definition, "$defs": schema["$defs"]}
    return jsonschema.Draft202012Validator(sub)


def validate(definition, text):
    document = json.loads(text)
    errors = sorted(validator(definition).iter_errors(document), key=lambda e: list(e.path))
    if errors:
        fail(f"--json output does not match #/$defs/{definition}: " +
             "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5]))
    return document


# ---------------------------------------------------------------- cases ---

def case_errors(tmp):
    run = scenario(tmp)
    _, _, err = ctl("--run-dir", run, "inspect", "nobody", expect=1)
    one_line_error(err, "no allocation 'nobody'")
    _, _, err = ctl("--run-dir", run, "set", "team-a", "--memory-limit", "8Qi", expect=2)
    one_line_error(err, "--memory-limit", "8Qi")
    _, _, err = ctl("--run-dir", run, "set", "team-a", "--compute-limit", "0", expect=2)
    one_line_error(err, "--compute-limit")
    _, _, err = ctl("--run-dir", run, "set", "team-a", "--mode", "turbo", expect=2)
    one_line_error(err, "capped or burst")
    _, _, err = ctl("--run-dir", run, "set", "team-a", expect=2)
    one_line_error(err, "nothing to change")
    _, _, err = ctl("--run-dir", run, "set", "team-a", "--weight", "2", expect=1)
    one_line_error(err, "cushared is not running", "--no-daemon")
    _, _, err = ctl("--run-dir", run, "inspect", "zz-future", expect=1)
    one_line_error(err, "layout version 2")
    _, out, err = ctl("--run-dir", run, "status", expect=1)  # shows the rest, fails for the bad one
    check("team-a" in out and "zz-future" in out, "status did not show both the good and the bad allocation")
    one_line_error(err, "could not be read")
    _, _, err = ctl("--run-dir", os.path.join(tmp, "missing"), "status", expect=1)
    one_line_error(err, "does not exist", "--run-dir")
    _, _, err = ctl("--run-dir", run, "create", "bad/id", "--memory-limit", "1Gi", expect=2)
    one_line_error(err, "may only use")
    _, _, err = ctl("--run-dir", run, "status", "--bogus", expect=2)
    one_line_error(err, "--help")
    ctl(expect=2)
    # A stale socket (daemon crashed) is "daemon down", not a hang or a crash.
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.path.join(run, "cushared.sock"))
    s.close()
    _, _, err = ctl("--run-dir", run, "set", "team-a", "--weight", "2", expect=1)
    one_line_error(err, "not running")
    _, out, _ = ctl("--run-dir", run, "inspect", "team-a", expect=0)
    check("allocation team-a" in out, "inspect with a stale socket did not fall back to the regions")


def case_json_schema(tmp):
    run = scenario(tmp, "--live-heartbeat")
    _, out, _ = ctl("--run-dir", run, "--json", "status", expect=1)  # zz-future makes it fail
    doc = validate("status", out)
    check(doc["daemon"]["up"], "live heartbeat not seen as daemon up")
    check(len(doc["allocations"]) == 3 and len(doc["problems"]) == 1, "wrong allocation/problem count")
    shutil.rmtree(os.path.join(run, "alloc", "zz-future"))
    _, out, _ = ctl("--run-dir", run, "--json", "status", expect=0)
    validate("status", out)
    _, out, _ = ctl("--run-dir", run, "--json", "inspect", "team-a", expect=0)
    doc = validate("allocation", out)
    check(doc["gpus"][0]["memory"]["limit_bytes"] == 8 << 30, "inspect --json quota is not in bytes")
    _, out, _ = ctl("--run-dir", os.path.join(run, "alloc", "team-a"), "--json", "status", expect=0)
    check(validate("status", out)["kind"] == "allocation", "allocation folder not detected")
    _, out, _ = ctl("--run-dir", run, "--json", "create", "job", "--memory-limit", "1Gi", expect=0)
    validate("create", out)
    _, out, _ = ctl("--run-dir", run, "--json", "set", "job", "--weight", "7", "--no-daemon", expect=0)
    validate("set", out)
    _, out, _ = ctl("--run-dir", run, "--json", "doctor", "--library", "/nonexistent/libcushare.so")
    doc = validate("doctor", out)
    check(not doc["ok"], "doctor passed with a missing library")


def case_create_remove(tmp):
    run = os.path.join(tmp, "node")
    _, out, _ = ctl("--run-dir", run, "create", "job-1", "--memory-limit", "2Gi", "--compute-limit", "30",
                    "--mode", "capped", "--library", "/opt/lib/libcushare.so", expect=0)
    folder = os.path.join(run, "alloc", "job-1")
    for flag in (f"-v {folder}:/var/run/cushare", f"-v {folder}/limits:/var/run/cushare/limits:ro",
                 "-e CUSHARE_RUN_DIR=/var/run/cushare",
                 "-v /opt/lib/libcushare.so:/usr/local/lib/cushare/libcushare.so:ro",
                 f"-v {run}/ld.so.preload:/etc/ld.so.preload:ro"):
        check(flag in out, f"create did not print {flag!r}:\n{out}")
    check(stat.S_IMODE(os.stat(os.path.join(folder, "limits")).st_mode) == 0o644, "limits is not 0644")
    check(stat.S_IMODE(os.stat(os.path.join(folder, "usage")).st_mode) == 0o666, "usage is not 0666")
    # Nothing the container can write is part of the preload chain: the file
    # is the node's, outside every allocation's folder.
    check(not os.path.exists(os.path.join(folder, "ld.so.preload")), "ld.so.preload in the folder")
    with open(os.path.join(run, "ld.so.preload")) as f:
        check(f.read().strip() == "/usr/local/lib/cushare/libcushare.so", "ld.so.preload content")
    check(stat.S_IMODE(os.stat(os.path.join(run, "alloc")).st_mode) == 0o700, "alloc/ is not 0700")
    check(stat.S_IMODE(os.stat(folder).st_mode) == 0o711, "the folder is not 0711")
    _, out, _ = ctl("--run-dir", run, "--json", "inspect", "job-1", expect=0)
    g = json.loads(out)["gpus"][0]
    check(g["uuid"] == "*" and g["memory"]["limit_bytes"] == 2 << 30, f"created limits wrong: {g}")
    check(g["compute"]["limit_pct"] == 30 and g["compute"]["weight"] == 30 and g["compute"]["mode"] == "capped",
          f"created compute wrong: {g}")
    _, _, err = ctl("--run-dir", run, "create", "job-1", "--memory-limit", "1Gi", expect=1)
    one_line_error(err, "already exists")
    _, out, err = ctl("--run-dir", run, "set", "job-1", "--memory-limit", "1Gi", "--mode", "burst", "--no-daemon",
                      expect=0)
    check("memory 2Gi -> 1Gi" in out and "mode capped -> burst" in out, f"set output: {out}")
    _, out, _ = ctl("--run-dir", run, "create", "job-2", "--memory-limit", "512Mi", "--preload", "env", expect=0)
    check("-e LD_PRELOAD=/usr/local/lib/cushare/libcushare.so" in out, "--preload env did not print LD_PRELOAD")
    _, out, _ = ctl("--run-dir", run, "status", expect=0)
    check("job-1" in out and "1Gi" in out and "burst 30%" in out and "job-2" in out, f"status after set:\n{out}")
    ctl("--run-dir", run, "remove", "job-1", expect=0)
    check(not os.path.exists(folder), "remove left the folder")
    _, _, err = ctl("--run-dir", run, "remove", "job-1", expect=1)
    one_line_error(err, "no allocation 'job-1'")


def case_container_view(tmp):
    run = scenario(tmp)
    folder = os.path.join(run, "alloc", "team-a")
    _, out, _ = ctl("status", env={"CUSHARE_RUN_DIR": folder}, expect=0)
    check(out.startswith("allocation team-a in " + folder), f"container status title:\n{out}")
    check("3.8Gi/8Gi" in out and "capped 50%" in out, f"container status lacks own quota:\n{out}")
    _, out, _ = ctl("inspect", "team-a", env={"CUSHARE_RUN_DIR": folder}, expect=0)
    check("41234" in out and "300Mi" in out, "container inspect lacks processes")
    _, _, err = ctl("inspect", "team-b", env={"CUSHARE_RUN_DIR": folder}, expect=1)
    one_line_error(err, "not 'team-b'")


def case_top_pty(tmp):
    run = scenario(tmp)
    sock = os.path.join(tmp, "tmux.sock")
    done = os.path.join(tmp, "exit-code")
    tmux = ["tmux", "-S", sock]
    command = f"{ARGS.ctl} --run-dir {run} top --interval 0.3; echo $? > {done}; sleep 5"
    subprocess.run(tmux + ["-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "30", command], check=True,
                   timeout=10)
    try:
        screen = ""
        deadline = time.time() + 15
        while time.time() < deadline:
            screen = subprocess.run(tmux + ["capture-pane", "-p"], capture_output=True, text=True, timeout=5).stdout
            if "team-a" in screen and "[" in screen:
                break
            time.sleep(0.2)
        check("team-a" in screen and "q or Ctrl-C quits" in screen, f"top drew no frame:\n{screen}")
        check(all(len(l) <= 80 for l in screen.splitlines()), "top frame wider than 80 columns")
        subprocess.run(tmux + ["send-keys", "q"], check=True, timeout=5)
        deadline = time.time() + 10
        while time.time() < deadline and not os.path.exists(done):
            time.sleep(0.1)
        check(os.path.exists(done), "top did not exit on q")
        with open(done) as f:
            check(f.read().strip() == "0", "top exited non-zero on q")
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True, timeout=5)
    # Ctrl-C path (SIGINT) without a terminal: frames stop, exit 0.
    proc = subprocess.Popen([ARGS.ctl, "--run-dir", run, "top", "--interval", "0.2"], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    time.sleep(0.8)
    proc.send_signal(2)
    out, _ = proc.communicate(timeout=10)
    check(proc.returncode == 0, f"top exited {proc.returncode} on SIGINT")
    check(out.count("q or Ctrl-C quits") >= 2, "top did not refresh")


def case_doctor(tmp):
    run = os.path.join(tmp, "node")
    ctl("--run-dir", run, "create", "job", "--memory-limit", "1Gi", expect=0)
    preload = os.path.join(tmp, "ld.so.preload")
    open(preload, "w").close()
    env = {"LD_LIBRARY_PATH": ARGS.fakegpu_dir, "FAKEGPU_STATE": os.path.join(tmp, "fakegpu.state")}
    rc, out, _ = ctl("--run-dir", run, "doctor", "--library", ARGS.library, "--ld-so-preload", preload, env=env)
    for line in ("[ ok ] library", "[ ok ] ld.so.preload", "[ ok ] driver", "[warn] daemon", "[ ok ] regions",
                 "[ ok ] permissions"):
        check(line in out, f"doctor lacks {line!r}:\n{out}")
    check(rc == 0, f"doctor failed on a good install:\n{out}")
    with open(preload, "w") as f:
        f.write("/nonexistent/libcushare.so\n")
    os.chmod(os.path.join(run, "alloc", "job", "limits"), 0o666)
    rc, out, _ = ctl("--run-dir", run, "doctor", "--library", ARGS.library, "--ld-so-preload", preload,
                     env={"LD_LIBRARY_PATH": "/nonexistent"})
    check(rc == 1, "doctor passed a broken install")
    for line in ("[FAIL] ld.so.preload", "[FAIL] permissions", "fix:"):
        check(line in out, f"doctor lacks {line!r}:\n{out}")


def priority_prefix():
    """The simulated GPU runs in real time: on a loaded machine the daemon's and
    tenants' wake-ups must not queue behind compilers (as tests/integration/scheduler)."""
    for prefix in (["chrt", "-r", "10"], ["nice", "-n", "-10"]):
        try:
            if subprocess.run(prefix + ["true"], capture_output=True).returncode == 0:
                return prefix
        except OSError:
            pass
    return []


class Node:
    """cushared plus tenants under libcushare.so on fakegpu, in `tmp`."""

    def __init__(self, tmp, metrics_port=None):
        self.tmp = tmp
        self.run = os.path.join(tmp, "run")
        os.makedirs(os.path.join(self.run, "alloc"))
        self.env = dict(os.environ)
        self.env.pop("CUSHARE_RUN_DIR", None)
        self.env.update({"FAKEGPU_STATE": os.path.join(tmp, "fakegpu.state"), "FAKEGPU_DEVICES": "H100:80Gi:132",
                         "LD_LIBRARY_PATH": ARGS.fakegpu_dir})
        self.priority = priority_prefix()
        args = self.priority + [ARGS.daemon, "--run-dir", self.run, "--quantum-ms", "10"]
        if metrics_port:
            args += ["--metrics-addr", f"127.0.0.1:{metrics_port}"]
        self.log = open(os.path.join(tmp, "cushared.log"), "w")
        self.daemon = subprocess.Popen(args, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        self.procs = [self.daemon]
        deadline = time.time() + 10
        while not os.path.exists(os.path.join(self.run, "cushared.sock")):
            check(self.daemon.poll() is None and time.time() < deadline, "cushared did not open its socket")
            time.sleep(0.05)

    def tenant_env(self, name, **limits):
        env = dict(self.env)
        env.update({"LD_PRELOAD": ARGS.library, "CUSHARE_RUN_DIR": os.path.join(self.run, "alloc", name)})
        env.update({k: str(v) for k, v in limits.items()})
        os.makedirs(env["CUSHARE_RUN_DIR"], exist_ok=True)
        return env

    def spin(self, name, seconds, **limits):
        p = subprocess.Popen(self.priority + [ARGS.spin_worker, "--seconds", str(seconds), "--kernel-us", "1000"],
                             env=self.tenant_env(name, **limits), stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(self.tmp, name + ".err"), "w"))
        self.procs.append(p)
        return p

    def stat(self):
        r = subprocess.run([ARGS.fakegpu_stat, "--json"], env=self.env, capture_output=True, text=True, check=True)
        doc = json.loads(r.stdout)
        dev = doc["devices"][0]
        return doc["time_ns"], {p["pid"]: p for p in dev["processes"]}

    def share(self, pid, window):
        t0, p0 = self.stat()
        time.sleep(window)
        t1, p1 = self.stat()
        busy = p1.get(pid, {}).get("busy_ns", 0) - p0.get(pid, {}).get("busy_ns", 0)
        return 100.0 * busy / (t1 - t0)

    def ctl(self, *argv, expect=0):
        return ctl("--run-dir", self.run, *argv, env=self.env, expect=expect)

    def close(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def case_set_live(tmp):
    node = Node(tmp)
    try:
        gb = 1 << 30
        worker = node.spin("t1", 12, CUSHARE_MEMORY_LIMIT="2Gi", CUSHARE_COMPUTE_LIMIT=50, CUSHARE_COMPUTE_MODE="capped")
        deadline = time.time() + 8
        while time.time() < deadline and node.stat()[1].get(worker.pid, {}).get("busy_ns", 0) == 0:
            time.sleep(0.05)
        time.sleep(0.5)
        before = node.share(worker.pid, 1.5)
        check(40 <= before <= 60, f"capped 50% tenant got {before:.1f}% before set")
        _, out, _ = node.ctl("--json", "status")
        doc = validate("status", out)
        check(doc["source"] == "daemon" and doc["daemon"]["up"], "status did not come from the daemon")
        probe = [ARGS.alloc_probe, "--step", "64Mi", "--max", "4Gi"]
        first = json.loads(subprocess.run(probe, env=node.tenant_env("t1"), capture_output=True, text=True,
                                          timeout=30).stdout.strip().splitlines()[-1])
        check(gb < first["bytes"] <= 2 * gb, f"alloc_probe got {first['bytes']} under a 2Gi quota")

        _, out, err = node.ctl("set", "t1", "--compute-limit", "20", "--memory-limit", "1Gi")
        check("compute 50% -> 20%" in out and "memory 2Gi -> 1Gi" in out, f"set output: {out} {err}")
        time.sleep(0.5)
        after = node.share(worker.pid, 1.5)
        check(14 <= after <= 26, f"tenant got {after:.1f}% after set --compute-limit 20 (was {before:.1f}%)")
        check(worker.poll() is None, "the running tenant died on set")
        second = json.loads(subprocess.run(probe, env=node.tenant_env("t1"), capture_output=True, text=True,
                                           timeout=30).stdout.strip().splitlines()[-1])
        check(second["bytes"] < 1 * gb - (256 << 20), f"alloc_probe got {second['bytes']} after the quota fell to 1Gi")
        _, out, _ = node.ctl("--json", "inspect", "t1")
        g = json.loads(out)["gpus"][0]
        check(g["memory"]["limit_bytes"] == gb and g["compute"]["limit_pct"] == 20, f"inspect after set: {g}")
        # Below current use: a warning, nothing killed.
        _, _, err = node.ctl("set", "t1", "--memory-limit", "1Mi")
        check("nothing is killed" in err, f"no below-use warning: {err!r}")
        time.sleep(0.3)
        check(worker.poll() is None, "lowering the quota below use killed the tenant")
        print(f"share {before:.1f}% -> {after:.1f}%, alloc_probe {first['bytes'] >> 20} MiB -> {second['bytes'] >> 20} MiB")
    finally:
        node.close()


def case_metrics_format(tmp):
    import socket
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    node = Node(tmp, metrics_port=port)
    try:
        worker = node.spin("t1", 6, CUSHARE_MEMORY_LIMIT="1Gi", CUSHARE_COMPUTE_LIMIT=50)
        time.sleep(1.5)
        text = ""
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                if 'alloc="t1"' in text or "t1" in text:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        families = list(text_string_to_metric_families(text))
        check(families, "no metrics parsed")
        names = set()
        for fam in families:
            names.add(fam.name)
            check(fam.name.startswith("cushare_"), f"metric {fam.name} lacks the cushare_ prefix")
            check(fam.type in ("counter", "gauge", "histogram", "summary", "info"), f"{fam.name}: type {fam.type}")
            check(fam.documentation, f"{fam.name} has no HELP text")
            for sample in fam.samples:
                for label in sample.labels:
                    check(label.replace("_", "a").isalnum() and label == label.lower(),
                          f"{sample.name}: label {label!r} is not snake_case")
            # Units in the name: bytes and seconds, counters of seconds end _seconds_total.
            check("byte" not in fam.name or fam.name.endswith("_bytes") or "_bytes_" in fam.name,
                  f"{fam.name}: byte metrics end in _bytes")
            check(not fam.name.endswith(("_ns", "_ms", "_us")), f"{fam.name}: use seconds, not ns/ms/us")
            if fam.type == "counter" and "seconds" in fam.name:
                check(fam.name.endswith("_seconds"), f"{fam.name}: a counter of time is _seconds_total")
            if fam.type == "counter":
                check(all(smp.name.endswith(("_total", "_created")) for smp in fam.samples),
                      f"{fam.name}: counter samples end in _total")
        check(any(n.endswith("_bytes") for n in names), f"no _bytes metric in {sorted(names)}")
        check(any(fam.type == "counter" and fam.name.endswith("_seconds") for fam in families),
              f"no _seconds_total counter in {sorted(names)}")
        check(any("t1" in smp.labels.values() for fam in families for smp in fam.samples),
              "no sample is labelled with the allocation id t1")
        check(worker.poll() is None, "tenant died")
        print(f"{len(families)} metric families ok: {', '.join(sorted(names))}")
    finally:
        node.close()


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--ctl", required=True)
    parser.add_argument("--write-scenario")
    parser.add_argument("--schema")
    parser.add_argument("--library")
    parser.add_argument("--fakegpu-dir")
    parser.add_argument("--daemon")
    parser.add_argument("--spin-worker")
    parser.add_argument("--alloc-probe")
    parser.add_argument("--fakegpu-stat")
    ARGS = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctl-it-")
    try:
        CASES[ARGS.case](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"ok: {ARGS.case}")


if __name__ == "__main__":
    main()
