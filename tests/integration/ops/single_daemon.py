"""One cushared per node: a second daemon on the same run dir or the same
metrics port must not start (it would grant leases in the same regions, or
take half of the scrapes), and must say why and exit non-zero. `:PORT`
listens on every interface. The run dir's lock goes with its holder, however
the holder ends.

  single_daemon.py CASE --build-dir BUILD
"""
import os
import socket
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "lib"))
import cushare_test as ct  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def second(node, run_dir, *args):
    """A second cushared, expected to refuse at once: (exit status, output)."""
    return ct.refused_daemon(node.b.tool("cushared"), run_dir, args, env=node.env)


def healthz(host, port):
    url = f"http://{host}:{port}/healthz"
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def wait_healthy(node, host, port):
    deadline = time.monotonic() + 30
    while True:
        try:
            return healthz(host, port)
        except OSError:
            ct.check(node.daemon_alive(), f"cushared exited:\n{node.daemon_log()}")
            ct.check(time.monotonic() < deadline, f"no /healthz on {host}:{port}")
            time.sleep(0.05)


def case_run_dir(b):
    with ct.Node(b) as node:
        node.start_daemon("--metrics-addr", f"127.0.0.1:{free_port()}")
        # Another port, the same run dir: refused by the run dir's lock.
        rc, out = second(node, node.run_dir, "--metrics-addr",
                         f"127.0.0.1:{free_port()}")
        ct.check(rc == 1, f"second cushared on the run dir exited {rc}:\n{out}")
        ct.check("another cushared" in out and f"pid {node.daemon.pid}" in out
                 and node.run_dir in out, f"no clear reason:\n{out}")
        ct.check(node.daemon_alive(), "the first daemon died")
        print(f"second daemon on the run dir: exit {rc}: {out.strip().splitlines()[-1]}")
        # The lock goes with the process, even one killed without cleanup:
        # no stale lock to remove by hand.
        node.daemon.kill()
        os.unlink(os.path.join(node.run_dir, "cushared.sock"))
        node.start_daemon()
        ct.check(node.daemon_alive(), "a daemon after a killed one did not start")


def case_port(b):
    with ct.Node(b) as node:
        port = free_port()
        # ":PORT" is every interface: IPv4 and, where the kernel has it, IPv6.
        node.start_daemon("--metrics-addr", f":{port}")
        status, body = wait_healthy(node, "127.0.0.1", port)
        ct.check(status == 200 and body == "ok\n", f"/healthz on 127.0.0.1: {status} {body!r}")
        if socket.has_ipv6 and os.path.exists("/proc/net/if_inet6"):
            status, body = healthz("[::1]", port)
            ct.check(status == 200, f"/healthz on [::1]: {status}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            ct.check("cushare_allocations" in r.read().decode(), "no cushare metrics")
        # Another run dir, the same port, whatever the address: refused.
        other = os.path.join(node.tmp, "run2")
        for addr in (f"127.0.0.1:{port}", f"0.0.0.0:{port}", f":{port}"):
            rc, out = second(node, other, "--metrics-addr", addr)
            ct.check(rc == 1 and "cannot listen on" in out and "in use" in out,
                     f"second cushared on {addr} exited {rc}:\n{out}")
        print(f"second daemon on the port: exit {rc}: {out.strip().splitlines()[-1]}")
        ct.check(node.daemon_alive(), "the first daemon died")
        status, _ = healthz("127.0.0.1", port)
        ct.check(status == 200, "the first daemon stopped answering")


if __name__ == "__main__":
    sys.exit(ct.run_cases({"run_dir": case_run_dir, "port": case_port}))
