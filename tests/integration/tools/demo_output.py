#!/usr/bin/python3
"""scripts/demo on fakegpu, as a new user runs it: piped (a few summary lines)
and on a terminal (the table redrawn in place). Every report names the
tenants (no `standalone-<uid>`), and the operator's table at the end shows
the daemon's share figures, not `-/-`.
"""
import argparse
import os
import pty
import re
import select
import subprocess
import time

from test_checks import check

ARGS = None
TENANTS = ("trainer", "inference", "notebook")


def demo_env():
    env = dict(os.environ)
    env["CUSHARE_BUILD_DIR"] = ARGS.build_dir
    return env


def check_report(out):
    check("done: nothing left running." in out, f"the demo did not finish cleanly:\n{out}")
    check("standalone" not in out, f"a report names a standalone allocation:\n{out}")
    check("allocation 'notebook'" in out, f"the notebook's refusal does not name it:\n{out}")
    operator = out[out.index("== cusharectl"):]
    rows = [l for l in operator.splitlines() if l.strip().split(" ")[0] in TENANTS]
    check(len(rows) == 3, f"the operator's table lacks a tenant:\n{operator}")
    for row in rows:
        check("-/-" not in row and re.search(r"\d+%/\d+%", row), f"no share figures while the daemon is up: {row}")


def piped():
    p = subprocess.run([ARGS.demo, "--fakegpu", "--seconds", "4"], capture_output=True, text=True,
                       env=demo_env(), timeout=120)
    out = p.stdout + p.stderr
    check(p.returncode == 0, f"demo exited {p.returncode}:\n{out}")
    check_report(out)
    lines = out.splitlines()
    check(len(lines) <= 35, f"piped, the demo printed {len(lines)} lines (a summary is ~30):\n{out}")
    check(out.count("tenant     mode") == 1, f"piped, the demo printed the table more than once:\n{out}")
    check("\x1b[" not in out, "piped output holds terminal escapes")
    return len(lines)


def on_terminal():
    master, slave = pty.openpty()
    p = subprocess.Popen([ARGS.demo, "--fakegpu", "--seconds", "4"], stdin=slave, stdout=slave, stderr=slave,
                         env=demo_env())
    os.close(slave)
    chunks = []
    deadline = time.time() + 120
    while time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif p.poll() is not None:
            break
    os.close(master)
    rc = p.wait(timeout=30)
    out = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    check(rc == 0, f"demo on a terminal exited {rc}:\n{out}")
    check_report(out)
    frames = out.count("tenant     mode")
    redraws = len(re.findall(r"\x1b\[\d+A\x1b\[J", out))
    check(frames >= 2 and redraws == frames - 1, f"{frames} tables, {redraws} redraws: not redrawn in place")
    return frames


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--demo", required=True)
    parser.add_argument("--build-dir", required=True)
    ARGS = parser.parse_args()
    lines = piped()
    frames = on_terminal()
    print(f"ok: piped {lines} lines; on a terminal {frames} tables, each redrawn over the last")


if __name__ == "__main__":
    main()
