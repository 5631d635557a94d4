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
import tempfile
import sys
import time

from test_checks import check, fail

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import cushare_test as ct  # noqa: E402

ARGS = None


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


def one_line_from(tool, stderr, *needles):
    """`stderr` is one line, `<tool>: ...`, holding every needle."""
    lines = [l for l in stderr.splitlines() if l.strip()]
    check(len(lines) == 1, f"{tool}: expected one stderr line, got {len(lines)}: {stderr!r}")
    check(lines[0].startswith(tool + ": "), f"stderr does not start with '{tool}: ': {lines[0]!r}")
    for needle in needles:
        check(needle in lines[0], f"{tool}: stderr lacks {needle!r}: {lines[0]!r}")


def one_line_error(stderr, *needles):
    one_line_from("cusharectl", stderr, *needles)


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
    s.bind(os.path.join(run, ct.SOCKET_NAME))
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
    # Written aside and renamed: the file must not appear before its figure does.
    command = f"{ARGS.ctl} --run-dir {run} top --interval 0.3; echo $? > {done}.new; mv {done}.new {done}; sleep 5"
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
    # SIGINT once two frames are out, however slowly top starts (before its
    # handler is in place, SIGINT would kill it).
    frames = ct.LineReader(proc.stdout)
    out = ""
    deadline = time.monotonic() + 15
    while out.count("q or Ctrl-C quits") < 2 and (line := frames.line(deadline)) is not None:
        out += line
    if out.count("q or Ctrl-C quits") < 2:
        proc.kill()
        proc.wait()
        fail(f"top did not refresh within 15 s (exit status {proc.returncode}):\n{out}")
    proc.send_signal(2)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        fail("top did not exit on SIGINT")
    check(proc.returncode == 0, f"top exited {proc.returncode} on SIGINT")


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


def run_tool(argv, env=None, cwd=None):
    """Runs any binary; returns (rc, stdout, stderr)."""
    full_env = dict(os.environ)
    full_env.pop("CUSHARE_RUN_DIR", None)
    full_env.update(env or {})
    proc = subprocess.run(argv, capture_output=True, text=True, env=full_env, cwd=cwd, timeout=30)
    return proc.returncode, proc.stdout, proc.stderr


def case_global_options(tmp):
    """--run-dir, -o/--output and --json work before and after the command."""
    run = scenario(tmp, "--live-heartbeat")
    shutil.rmtree(os.path.join(run, "alloc", "zz-future"))
    for argv in (["--run-dir", run, "status", "--json"], ["--json", "--run-dir", run, "status"],
                 ["status", "--run-dir", run, "-o", "json"], ["-o", "json", "status", "--run-dir", run],
                 ["--run-dir", "/nonexistent", "status", "--run-dir", run, "--output", "json"]):
        _, out, _ = ctl(*argv, expect=0)
        check(validate("status", out)["run_dir"] == run, f"{argv}: wrong run dir")
    _, out, _ = ctl("inspect", "team-a", "--run-dir", run, "--json", expect=0)
    validate("allocation", out)
    _, table, _ = ctl("status", "--run-dir", run, expect=0)
    _, wide, _ = ctl("status", "--run-dir", run, "-o", "wide", expect=0)
    long_id = "team-b-training-job-with-a-long-name"
    check(long_id not in table and all(len(l) <= 80 for l in table.splitlines()), f"table:\n{table}")
    check(long_id in wide and "GPU-8f0c1a4e-2b3d-4c5e-9f60-718293a4b5c6" in wide, f"-o wide cut:\n{wide}")
    _, tab2, _ = ctl("status", "--run-dir", run, "-o", "table", expect=0)
    check(tab2 == table, "-o table differs from the default")
    _, _, err = ctl("status", "--run-dir", run, "-o", "yaml", expect=2)
    one_line_error(err, "-o 'yaml'", "table, wide or json")
    _, _, err = ctl("status", "--run-dir", run, "--json", "-o", "wide", expect=2)
    one_line_error(err, "--json", "-o wide")
    _, out, _ = ctl("create", "job", "--memory-limit", "1Gi", "--run-dir", run, "--json", expect=0)
    validate("create", out)
    _, out, _ = ctl("set", "job", "--weight", "3", "--no-daemon", "--run-dir", run, "-o", "json", expect=0)
    validate("set", out)
    _, _, err = ctl("top", "--run-dir", run, "-o", "json", expect=2)
    one_line_error(err, "status -o json")


def case_version(tmp):
    for tool in (ARGS.ctl, ARGS.daemon, ARGS.plugin):
        name = os.path.basename(tool)
        rc, out, err = run_tool([tool, "--version"])
        check(rc == 0, f"{name} --version exited {rc}: {err}")
        check(out.strip() == f"{name} {ARGS.version}", f"{name} --version printed {out!r}, not {ARGS.version}")


def case_unknown_command(tmp):
    _, _, err = ctl("stauts", expect=2)
    one_line_error(err, "unknown command 'stauts'", "did you mean status?")
    _, _, err = ctl("--json", "inspct", "team-a", expect=2)
    one_line_error(err, "unknown command 'inspct'", "did you mean inspect?")
    _, _, err = ctl("frobnicate", expect=2)
    one_line_error(err, "unknown command 'frobnicate'", "status, top, inspect, set, create, remove, doctor")
    _, _, err = ctl(expect=2)
    one_line_error(err, "no command given")
    _, _, err = ctl("--bogus", expect=2)
    one_line_error(err, "unknown option '--bogus'")
    check("subcommand" not in err, f"CLI11's wording leaked: {err!r}")


def case_usage_exit_codes(tmp):
    """cushared and the plugin exit 2 on every usage error, 0 on --help."""
    for argv, needle in (([], "--run-dir is required"), (["--bogus"], "--bogus"),
                         (["--run-dir", tmp, "--quantum-ms", "abc"], "--quantum-ms"),
                         (["--run-dir", tmp, "--quantum-ms"], "--quantum-ms"),
                         (["--run-dir", tmp, "--metrics-addr", "nohost"], "HOST:PORT"),
                         (["--run-dir", tmp, "--config", os.path.join(tmp, "missing.json")], "missing.json")):
        rc, out, err = run_tool([ARGS.daemon, *argv])
        check(rc == 2, f"cushared {argv}: exit {rc}, expected 2\n{err}")
        one_line_from("cushared", err, needle)
    for argv, needle in ((["--bogus"], "--bogus"), (["--units-per-gpu", "x"], "--units-per-gpu"),
                         (["--units-per-gpu"], "--units-per-gpu"), (["--health-checks", "maybe"], "--health-checks")):
        rc, out, err = run_tool([ARGS.plugin, *argv])
        check(rc == 2, f"cushare-device-plugin {argv}: exit {rc}, expected 2\n{err}")
        one_line_from("cushare-device-plugin", err, needle)
    for tool in (ARGS.daemon, ARGS.plugin):
        rc, out, _ = run_tool([tool, "--help"])
        check(rc == 0 and "--version" in out and "--log-level" in out, f"{tool} --help: exit {rc}\n{out}")


def case_log_levels(tmp):
    """A level spdlog does not know would turn logging off: refused instead."""
    rc, _, err = run_tool([ARGS.daemon, "--run-dir", tmp, "--log-level", "verbose"])
    check(rc == 2, f"cushared --log-level verbose: exit {rc}")
    one_line_from("cushared", err, "--log-level 'verbose' is not a log level", "trace")
    config = os.path.join(tmp, "cushared.json")
    with open(config, "w") as f:
        json.dump({"log_level": "INFO"}, f)
    rc, _, err = run_tool([ARGS.daemon, "--run-dir", tmp, "--config", config])
    check(rc == 2, f"cushared with log_level INFO in the config: exit {rc}")
    one_line_from("cushared", err, "log_level", "'INFO'")
    for level in ("trace", "debug", "info", "warn", "error", "critical", "off"):
        rc, out, err = run_tool([ARGS.daemon, "--run-dir", tmp, "--log-level", level, "--check-config"])
        check(rc == 0 and f"log level {level}" in out, f"cushared --log-level {level}: exit {rc} {out} {err}")
    rc, _, err = run_tool([ARGS.plugin, "--log-level", "verbose", "--check-config"])
    check(rc == 2, f"cushare-device-plugin --log-level verbose: exit {rc}")
    one_line_from("cushare-device-plugin", err, "--log-level", "verbose")
    with open(os.path.join(tmp, "plugin.json"), "w") as f:
        json.dump({"logLevel": "verbose"}, f)
    rc, _, err = run_tool([ARGS.plugin, "--config", os.path.join(tmp, "plugin.json"), "--check-config"])
    check(rc == 2, f"cushare-device-plugin with logLevel verbose: exit {rc}")
    one_line_from("cushare-device-plugin", err, "logLevel 'verbose'")
    rc, out, err = run_tool([ARGS.plugin, "--log-level", "debug", "--check-config"])
    check(rc == 0, f"cushare-device-plugin --log-level debug: exit {rc} {err}")


def case_set_json(tmp):
    """`set --json` prints the figures (bytes, null for none), not the human lines."""
    run = os.path.join(tmp, "node")
    ctl("--run-dir", run, "create", "job", "--memory-limit", "1Gi", "--compute-limit", "40", expect=0)
    _, out, err = ctl("--run-dir", run, "set", "job", "--memory-limit", "2Gi", "--mode", "capped",
                      "--no-daemon", "--json", expect=0)
    doc = validate("set", out)
    check(doc["alloc"] == "job" and len(doc["entries"]) == 1, f"set --json: {doc}")
    e = doc["entries"][0]
    check(e["uuid"] == "*" and e["before"]["memory_limit_bytes"] == 1 << 30
          and e["after"]["memory_limit_bytes"] == 2 << 30, f"set --json memory: {e}")
    check(e["before"]["mode"] == "burst" and e["after"]["mode"] == "capped", f"set --json mode: {e}")
    check(e["after"]["compute_limit_pct"] == 40 and e["after"]["weight"] == 40, f"set --json kept: {e}")
    check(sorted(e["changed"]) == ["memory_limit_bytes", "mode"], f"set --json changed: {e['changed']}")
    check("->" not in out, f"set --json printed a human line:\n{out}")
    _, out, _ = ctl("--run-dir", run, "set", "job", "--memory-limit", "none", "--no-daemon", "-o", "json", expect=0)
    e = validate("set", out)["entries"][0]
    check(e["after"]["memory_limit_bytes"] is None, f"none is not null: {e}")
    _, out, _ = ctl("--run-dir", run, "set", "job", "--weight", "40", "--no-daemon", "--json", expect=0)
    check(validate("set", out)["entries"][0]["changed"] == [], "an unchanged entry lists changes")
    _, out, _ = ctl("--run-dir", run, "set", "job", "--weight", "5", "--no-daemon", expect=0)
    check(out.strip() == "job *: weight 40 -> 5", f"human set output: {out!r}")


def fakegpu_env(tmp, devices):
    return {"LD_LIBRARY_PATH": ARGS.fakegpu_dir, "FAKEGPU_STATE": os.path.join(tmp, "fakegpu.state"),
            "FAKEGPU_DEVICES": devices}


def case_create_gpu(tmp):
    """--gpu takes an index (resolved to the UUID through NVML) or a UUID;
    create prints --gpus device=UUID for per-GPU allocations."""
    run = os.path.join(tmp, "node")
    os.makedirs(os.path.join(run, "alloc"))
    env = fakegpu_env(tmp, "H100:80Gi:132;L4:24Gi:58")
    _, out, _ = ctl("--run-dir", run, "status", "--json", env=env, expect=0)
    uuids = {g["index"]: g["uuid"] for g in validate("status", out)["gpus"]}
    check(sorted(uuids) == [0, 1] and all(u.startswith("GPU-") for u in uuids.values()), f"NVML GPUs: {uuids}")

    _, out, _ = ctl("--run-dir", run, "create", "one", "--memory-limit", "1Gi", "--gpu", "1", env=env, expect=0)
    check(f"--gpus device={uuids[1]} IMAGE" in out, f"create --gpu 1 did not print --gpus device=:\n{out}")
    check("--gpus all" not in out, f"create --gpu 1 printed --gpus all:\n{out}")
    _, out, _ = ctl("--run-dir", run, "inspect", "one", "--json", env=env, expect=0)
    gpus = validate("allocation", out)["gpus"]
    check([g["uuid"] for g in gpus] == [uuids[1]], f"--gpu 1 stored {[g['uuid'] for g in gpus]}, not the UUID")

    _, out, _ = ctl("--run-dir", run, "create", "two", "--memory-limit", "25%", "--gpu", uuids[0],
                    "--gpu", "1", env=env, expect=0)
    check(f"--gpus '\"device={uuids[0]},{uuids[1]}\"' IMAGE" in out, f"two GPUs:\n{out}")
    _, out, _ = ctl("--run-dir", run, "inspect", "two", "--json", env=env, expect=0)
    limits = [g["memory"]["limit_bytes"] for g in validate("allocation", out)["gpus"]]
    check(limits == [20 << 30, 6 << 30], f"25% of 80Gi and 24Gi: {limits}")
    _, out, _ = ctl("--run-dir", run, "create", "three", "--memory-limit", "1Gi", "--gpu", "0", "--json",
                    env=env, expect=0)
    args = validate("create", out)["docker_args"]
    check(args[-2:] == ["--gpus", f"device={uuids[0]}"], f"create --json docker_args: {args}")
    _, out, _ = ctl("--run-dir", run, "create", "every", "--memory-limit", "1Gi", "--json", env=env, expect=0)
    check(validate("create", out)["docker_args"][-2:] == ["--gpus", "all"], "no --gpu is not --gpus all")

    _, _, err = ctl("--run-dir", run, "create", "bad", "--memory-limit", "1Gi", "--gpu", "2", env=env, expect=2)
    one_line_error(err, "--gpu 2", "no GPU 2")
    _, _, err = ctl("--run-dir", run, "create", "bad", "--memory-limit", "1Gi", "--gpu", "0",
                    env={"LD_LIBRARY_PATH": "/nonexistent"}, expect=2)
    one_line_error(err, "--gpu 0", "NVML")
    _, _, err = ctl("--run-dir", run, "create", "bad", "--memory-limit", "1Gi", "--gpu", "first", env=env, expect=2)
    one_line_error(err, "'first'", "GPU UUID")
    _, _, err = ctl("--run-dir", run, "create", "bad", "--memory-limit", "1Gi", "--gpu", "0", "--gpu", uuids[0],
                    env=env, expect=2)
    one_line_error(err, "a second time")
    check(not os.path.exists(os.path.join(run, "alloc", "bad")), "a refused create left its folder")


def case_arg_checks(tmp):
    """Values that used to be accepted and did something surprising."""
    run = scenario(tmp)
    start = time.monotonic()
    _, _, err = ctl("--run-dir", run, "top", "--iterations", "0", expect=2)
    one_line_error(err, "--iterations 0")
    _, out, _ = ctl("--run-dir", run, "top", "--iterations", "2", "--interval", "0.1", expect=0)
    check(out.count("q or Ctrl-C quits") == 2, f"top --iterations 2 drew {out.count('q or Ctrl-C quits')} frames")
    check(time.monotonic() - start < 10, "top --iterations did not return promptly")

    cwd = os.path.join(tmp, "cwd")
    os.makedirs(cwd)
    for argv, env, needles in (
            (["--run-dir", "", "create", "x", "--memory-limit", "1Gi"], None, ["--run-dir is empty"]),
            (["create", "x", "--memory-limit", "1Gi", "--run-dir", "rel"], None, ["--run-dir 'rel'", "relative"]),
            (["create", "x", "--memory-limit", "1Gi"], {"CUSHARE_RUN_DIR": "rel"}, ["CUSHARE_RUN_DIR 'rel'"]),
            (["status"], {"CUSHARE_RUN_DIR": "."}, ["CUSHARE_RUN_DIR '.'"])):
        rc, _, err = run_tool([ARGS.ctl, *argv], env=env, cwd=cwd)
        check(rc == 2, f"cusharectl {argv} {env}: exit {rc}, expected 2: {err}")
        one_line_error(err, *needles)
    check(os.listdir(cwd) == [], f"a refused run dir still made {os.listdir(cwd)} in the working directory")

    node = os.path.join(tmp, "node")
    for value, needle in (("0", "zero quota"), ("0Mi", "zero quota"), ("1.5", "not a whole number of bytes"),
                          ("1.3Ki", "not a whole number of bytes"), ("0%", "above 0%")):
        _, _, err = ctl("--run-dir", node, "create", "x", "--memory-limit", value, expect=2)
        one_line_error(err, "--memory-limit", needle)
    _, _, err = ctl("--run-dir", run, "set", "team-a", "--memory-limit", "0", "--no-daemon", expect=2)
    one_line_error(err, "zero quota")
    for value in ("", "rel/dir", "/a:b"):
        _, _, err = ctl("--run-dir", node, "create", "x", "--memory-limit", "1Gi", "--container-run-dir", value,
                        expect=2)
        one_line_error(err, "--container-run-dir")
    check(not os.path.exists(os.path.join(node, "alloc", "x")), "a refused create left its folder")
    _, out, _ = ctl("--run-dir", node, "create", "x", "--memory-limit", "1.5Gi", "--json", expect=0)
    _, out, _ = ctl("--run-dir", node, "inspect", "x", "--json", expect=0)
    check(json.loads(out)["gpus"][0]["memory"]["limit_bytes"] == 3 << 29, "1.5Gi is not 1.5 GiB")


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
        # The simulated GPU runs in real time: on a loaded machine the daemon's
        # and tenants' wake-ups must not queue behind compilers.
        self.priority = ct.priority_prefix()
        args = ["--quantum-ms", "10"]
        if metrics_port:
            args += ["--metrics-addr", f"127.0.0.1:{metrics_port}"]
        try:
            self.daemon = ct.start_daemon(ARGS.daemon, self.run, args, env=self.env, priority=True,
                                          log_path=os.path.join(tmp, "cushared.log"))
        except ct.Failure as e:
            fail(str(e))
        self.procs = []

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
        self.daemon.stop(timeout=5)


def case_set_live(tmp):
    node = Node(tmp)
    try:
        gb = 1 << 30
        # Lives until node.close(): it is checked alive after steps of no fixed length.
        worker = node.spin("t1", 120, CUSHARE_MEMORY_LIMIT="2Gi", CUSHARE_COMPUTE_LIMIT=50, CUSHARE_COMPUTE_MODE="capped")
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
        # Lives until node.close(): the metrics may take up to 10 s to show it.
        worker = node.spin("t1", 120, CUSHARE_MEMORY_LIMIT="1Gi", CUSHARE_COMPUTE_LIMIT=50,
                           CUSHARE_COMPUTE_MODE="capped")
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
                    # UUID is dcgm-exporter's spelling, kept so that GPU series of
                    # both exporters join on it; every other label is snake_case.
                    check(label == "UUID" or (label.replace("_", "a").isalnum() and label == label.lower()),
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
        # A capped allocation shows the scale its cap clock runs at.
        scales = [smp.value for fam in families if fam.name == "cushare_cap_busy_scale"
                  for smp in fam.samples if smp.labels.get("allocation") == "t1"]
        check(len(scales) == 1 and 1.0 <= scales[0] <= 1.25, f"cushare_cap_busy_scale of t1: {scales}")
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
    parser.add_argument("--plugin")
    parser.add_argument("--version")
    ARGS = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctl-it-")
    try:
        CASES[ARGS.case](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"ok: {ARGS.case}")


if __name__ == "__main__":
    main()
