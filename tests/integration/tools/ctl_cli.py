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
                 f"-v {folder}/ld.so.preload:/etc/ld.so.preload:ro"):
        check(flag in out, f"create did not print {flag!r}:\n{out}")
    check(stat.S_IMODE(os.stat(os.path.join(folder, "limits")).st_mode) == 0o644, "limits is not 0644")
    check(stat.S_IMODE(os.stat(os.path.join(folder, "usage")).st_mode) == 0o666, "usage is not 0666")
    with open(os.path.join(folder, "ld.so.preload")) as f:
        check(f.read().strip() == "/usr/local/lib/cushare/libcushare.so", "ld.so.preload content")
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
    ARGS = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctl-it-")
    try:
        CASES[ARGS.case](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"ok: {ARGS.case}")


if __name__ == "__main__":
    main()
