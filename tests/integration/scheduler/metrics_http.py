#!/usr/bin/python3
"""ctest daemon.metrics_http: cushared's HTTP endpoint against hostile clients.

A real cushared (fakegpu, temporary run dir) with --metrics-addr
127.0.0.1:<free port>:
  - GET /metrics and GET /healthz are served; other paths get 404, other
    methods on them 405, an announced body 413; keep-alive works;
  - POST /metrics announcing Content-Length: 1 GiB (headers and a few KiB
    sent, then more pushed while the socket takes it) gets an error and the
    daemon's RSS grows by less than 16 MiB;
  - while 32 slowloris connections (a header dribbled a byte at a time) and
    1000 idle connections are held open, by a separate attacker process that
    reopens whatever the daemon closes, a fresh GET /metrics is answered
    within 1 s, every time out of several spread over the attack;
  - a second cushared on the same port exits non-zero, saying why, and the
    first one keeps serving.

Usage: metrics_http.py --build-dir BUILD [--cushared PATH]
       metrics_http.py --attack PORT --slow N --idle N   (the attacker)
"""
import argparse
import os
import re
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import cushare_test as ct  # noqa: E402

SCRAPE_BOUND_S = 1.0
RSS_BOUND_KIB = 16 * 1024


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def raise_fd_limit(wanted):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def exchange(port, raw, timeout=10.0):
    """Sends `raw` on a fresh connection; returns (status, headers, body)
    of the first response, or raises."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        return read_response(s)


def read_response(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response head: {data!r}")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside a response body")
        body += chunk
    return status, headers, body[:length]


def vm_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def vm_rss_kib(pid):
    return vm_kib(pid, "VmRSS")


def reset_peak_rss(pid):
    """Restarts VmHWM (the peak RSS) from the current RSS, so that a body
    buffered and freed again still shows; False where the kernel refuses."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def daemon_fd_limit():
    """The common default soft limit (systemd's), not the attacker's raised one."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the attacker (a separate process, so it does not slow the scrapes' client)

def attack(port, n_slow, n_idle):
    raise_fd_limit(n_slow + n_idle + 64)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # KeyboardInterrupt: report
    poller = select.poll()
    socks = {}  # fd -> (kind, socket)
    stats = {"slow": 0, "idle": 0, "bytes_dribbled": 0}  # reopened per kind

    def open_one(kind):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks[s.fileno()] = (kind, s)
        poller.register(s.fileno(), select.POLLIN)

    def close_one(fd):
        poller.unregister(fd)
        socks.pop(fd)[1].close()

    for _ in range(n_slow):
        open_one("slow")
    for _ in range(n_idle):
        open_one("idle")
    print("ready", flush=True)
    header = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "
    sent = {}
    try:
        while True:
            # Whatever the daemon closed (EOF, reset, a 408) is reopened.
            for fd, _ in poller.poll(50):
                if fd in socks:
                    kind = socks[fd][0]
                    close_one(fd)
                    sent.pop(fd, None)
                    open_one(kind)
                    stats[kind] += 1
            for fd, (kind, s) in list(socks.items()):
                if kind != "slow":
                    continue
                i = sent.get(fd, 0)
                try:
                    s.send(header[i:i + 1] if i < len(header) else b"a")
                    sent[fd] = i + 1
                    stats["bytes_dribbled"] += 1
                except BlockingIOError:
                    pass  # still connecting
                except OSError:
                    close_one(fd)
                    sent.pop(fd, None)
                    open_one(kind)
                    stats[kind] += 1
    except KeyboardInterrupt:
        print(f"attacker: reopened after the daemon closed them {stats['slow']} slowloris and "
              f"{stats['idle']} idle connections; {stats['bytes_dribbled']} bytes dribbled",
              flush=True)


# --- the checks

def check_endpoints(port):
    status, headers, body = exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    if status != 200 or body != b"ok\n":
        fail(f"GET /healthz: {status} {body!r}")
    status, headers, body = exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    if status != 200 or b"cushare_allocations" not in body:
        fail(f"GET /metrics: {status} {body[:200]!r}")
    if not headers.get("content-type", "").startswith("text/plain; version=0.0.4"):
        fail(f"GET /metrics content type: {headers}")
    expected = [
        (b"GET / HTTP/1.1\r\n\r\n", 404),
        (b"GET /debug HTTP/1.1\r\n\r\n", 404),
        (b"POST /upload HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 404),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
        (b"PUT /healthz HTTP/1.1\r\n\r\n", 405),
        (b"HEAD /metrics HTTP/1.1\r\n\r\n", 405),
        (b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 413),
        (b"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 413),
        (b"NOT HTTP\r\n\r\n", 400),
    ]
    for raw, want in expected:
        status, headers, _ = exchange(port, raw)
        if status != want or headers.get("connection") != "close":
            fail(f"{raw.splitlines()[0]!r}: {status} {headers}, expected {want} and a close")
        if want == 405 and headers.get("allow") != "GET":
            fail(f"405 without Allow: GET: {headers}")
    # Keep-alive: two requests, one connection.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for path in (b"/metrics", b"/healthz"):
            s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, _ = read_response(s)
            if status != 200 or headers.get("connection") != "keep-alive":
                fail(f"keep-alive GET {path!r}: {status} {headers}")
    print("endpoints: /metrics, /healthz 200; 404, 405, 413, 400 and keep-alive as expected")


def check_big_body(port, pid):
    peak_known = reset_peak_rss(pid)
    before = vm_rss_kib(pid)
    statuses = []
    pushed_total = 0
    for target in (b"/metrics", b"/healthz", b"/upload"):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST " + target + b" HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/octet-stream\r\nContent-Length: 1073741824\r\n\r\n" +
                  b"x" * 4096)
        status, headers, _ = read_response(s)
        statuses.append(status)
        if status not in (400, 405, 413) or headers.get("connection") != "close":
            fail(f"POST {target!r} with 1 GiB announced: {status} {headers}")
        # Keep pushing the body while the socket takes it: the daemon must
        # drop it, not hold it.
        s.setblocking(False)
        chunk = b"x" * 65536
        deadline = time.monotonic() + 3
        closed = False
        while time.monotonic() < deadline and not closed:
            try:
                pushed_total += s.send(chunk)
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                closed = True
        s.close()
        if not closed:
            fail(f"POST {target!r}: the daemon still takes the body 3 s after refusing it")
    time.sleep(0.3)
    grown = vm_rss_kib(pid) - before
    peak = vm_kib(pid, "VmHWM") - before if peak_known else grown
    if max(grown, peak) >= RSS_BOUND_KIB:
        fail(f"RSS grew by {grown} KiB (peak {peak:+d} KiB) after 1 GiB bodies were announced")
    print(f"1 GiB bodies: answered {statuses}, connections closed, {pushed_total // 1024} KiB "
          f"pushed in all, RSS {before} KiB -> {before + grown} KiB ({grown:+d} KiB, "
          f"peak {peak:+d} KiB{'' if peak_known else ' (not measured)'})")


def timed_scrape(port):
    t0 = time.monotonic()
    status, _, body = exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                               b"Connection: close\r\n\r\n", timeout=SCRAPE_BOUND_S * 5)
    elapsed = time.monotonic() - t0
    if status != 200 or b"cushare_allocations" not in body:
        fail(f"scrape under attack: {status}")
    return elapsed


def check_under_attack(port, pid, n_slow, n_idle):
    before = vm_rss_kib(pid)
    attacker = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--attack", str(port),
                                 "--slow", str(n_slow), "--idle", str(n_idle)],
                                stdout=subprocess.PIPE, text=True)
    try:
        if attacker.stdout.readline().strip() != "ready":
            fail("the attacker did not start")
        time.sleep(0.5)
        if attacker.poll() is not None:
            fail(f"the attacker died ({attacker.returncode})")
        # Spread over more than the request timeout (2 s), so the scrapes also
        # meet the daemon expiring and the attacker reopening connections.
        times = []
        for _ in range(10):
            times.append(timed_scrape(port))
            time.sleep(0.4)
        rss = vm_rss_kib(pid)
    finally:
        attacker.send_signal(signal.SIGTERM)
        out, _ = attacker.communicate(timeout=30)
    print(out.strip())
    slowest = max(times)
    print(f"under {n_slow} slowloris + {n_idle} idle connections: {len(times)} scrapes, "
          f"slowest {slowest * 1000:.0f} ms, median {sorted(times)[len(times) // 2] * 1000:.0f} ms;"
          f" RSS {before} KiB -> {rss} KiB")
    if slowest > SCRAPE_BOUND_S:
        fail(f"a scrape took {slowest:.2f} s under attack (bound {SCRAPE_BOUND_S} s): "
             f"{[round(t, 3) for t in times]}")
    # A sanitizer's allocator keeps freed memory in quarantine: no bound then.
    sanitized = any(k in os.environ for k in ("ASAN_OPTIONS", "TSAN_OPTIONS"))
    if rss - before >= RSS_BOUND_KIB and not sanitized:
        fail(f"RSS grew by {rss - before} KiB under attack")


def check_second_daemon(b, cushared, env, tmp, port):
    run2 = os.path.join(tmp, "run2")
    os.makedirs(os.path.join(run2, "alloc"))
    for addr in (f"127.0.0.1:{port}", f"0.0.0.0:{port}"):
        try:
            rc, text = ct.refused_daemon(cushared, run2, ["--metrics-addr", addr], env=env,
                                         timeout=30)
        except ct.Failure as e:
            fail(str(e))
        if rc == 0 or "cannot listen on" not in text or "in use" not in text:
            fail(f"a second cushared on {addr}: exit {rc}\n{text}")
    print(f"second cushared on the port: exits {rc}: "
          f"{[l for l in text.splitlines() if 'cannot listen' in l][0].split('cushared: ')[-1]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir")
    ap.add_argument("--cushared", help="the binary to test (default BUILD/bin/cushared)")
    ap.add_argument("--attack", type=int, metavar="PORT")
    ap.add_argument("--slow", type=int, default=32)
    ap.add_argument("--idle", type=int, default=1000)
    args = ap.parse_args()
    if args.attack:
        attack(args.attack, args.slow, args.idle)
        return
    b = os.path.abspath(args.build_dir)
    cushared = args.cushared or os.path.join(b, "bin", "cushared")
    if raise_fd_limit(args.slow + args.idle + 64) < args.slow + args.idle + 64:
        fail("cannot raise the open-files limit for the attacker")
    with tempfile.TemporaryDirectory(prefix="cushare-http-") as tmp:
        run = os.path.join(tmp, "run")
        os.makedirs(os.path.join(run, "alloc"))
        env = ct.fakegpu_env(b, tmp)
        port = free_port()
        log_path = os.path.join(tmp, "cushared.log")

        def healthy():
            try:
                return exchange(port, b"GET /healthz HTTP/1.1\r\n\r\n", timeout=2)[0] == 200
            except OSError:
                return False

        try:
            daemon = ct.start_daemon(cushared, run, ["--metrics-addr", f"127.0.0.1:{port}"],
                                     env=env, log_path=log_path, ready=healthy, timeout=15,
                                     preexec_fn=daemon_fd_limit)
        except ct.Failure as e:
            fail(f"cushared does not serve /healthz: {e}")
        try:
            check_endpoints(port)
            check_big_body(port, daemon.pid)
            check_under_attack(port, daemon.pid, args.slow, args.idle)
            check_second_daemon(b, cushared, env, tmp, port)
            if exchange(port, b"GET /healthz HTTP/1.1\r\n\r\n")[0] != 200:
                fail("the first cushared stopped serving")
            if not daemon.alive():
                fail(f"cushared died ({daemon.returncode}):\n{open(log_path).read()}")
        finally:
            code = daemon.stop(timeout=15)
            if daemon.killed:
                fail("cushared did not stop on SIGTERM")
        if code != 0:
            fail(f"cushared exited {code} on SIGTERM:\n{open(log_path).read()}")
        print("PASS")


if __name__ == "__main__":
    main()
