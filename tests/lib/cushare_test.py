"""The Python test toolkit: a node on fakegpu (run dir, fakegpu state, a
cushared), allocations made the way operators make them (`cusharectl
create`), tenants started the way containers start them, and fakegpu's
ground truth.

A tenant "in a container" runs in a mount namespace of its own where, as a
container runtime would:
  - the allocation's folder is bind-mounted at /var/run/cushare (through /run,
    which gets a private tmpfs), with its `limits` bind-mounted read-only over it;
  - /etc is a private copy with the node's ld.so.preload bind-mounted read-only
    at /etc/ld.so.preload (when the allocation preloads through the file);
  - the process runs as a given uid (a non-root test user, or root without the
    capabilities a container runtime drops).
That needs root; `need_root()` skips (or fails under CI) without it.

Every harness starts its cushared with start_daemon() (on a Node, through
Node.start_daemon()).

Import with:  sys.path.insert(0, <repo>/tests/lib); import cushare_test as ct
"""
import contextlib
import fcntl
import json
import os
import pwd
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cushare_timing as tm  # noqa: E402
from cushare_regions import SOCKET_NAME  # noqa: E402

SKIP = 77
MI = 1 << 20
GI = 1 << 30
TENANT_USER = "cushare-tenant"
# Held by every test of this toolkit while it adds the test user or copies
# /etc: tests run in parallel, and useradd's lock and temporary files in /etc
# come and go under a concurrent `cp -a /etc`.
USER_DB_LOCK = "/tmp/cushare-tenant-user.lock"
CONTAINER_LIBRARY = "/usr/local/lib/cushare/libcushare.so"  # where cusharectl mounts it

# What a container runtime (Docker's default set) leaves to container root:
# no CAP_SYS_ADMIN (no mounts), no CAP_SYS_PTRACE, no CAP_SYS_RESOURCE.
CONTAINER_ROOT_CAPS = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid",
                       "setpcap", "net_bind_service", "net_raw", "sys_chroot", "mknod",
                       "audit_write", "setfcap")


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def skip_or_fail(why):
    if os.environ.get("CI") == "true":
        print(f"FAIL (CI must not skip): {why}")
        sys.exit(1)
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def need_root():
    if os.geteuid() != 0:
        skip_or_fail("needs root (mount namespaces, a non-root test user)")
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} is not installed")


@contextlib.contextmanager
def user_db_lock():
    """USER_DB_LOCK, held for the block."""
    fd = os.open(USER_DB_LOCK, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _tenant_entry():
    try:
        return pwd.getpwnam(TENANT_USER)
    except KeyError:
        return None


def tenant_user():
    """(uid, gid) of the unprivileged test user, created when missing."""
    pw = _tenant_entry()
    if pw is None:
        with user_db_lock():
            # Another test may have added it while this one waited for the lock.
            pw = _tenant_entry()
            if pw is None:
                r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                                    "/usr/sbin/nologin", TENANT_USER], capture_output=True,
                                   text=True)
                # A useradd outside this toolkit may have won the race: its
                # user is as good as ours.
                pw = _tenant_entry()
                if pw is None:
                    raise Failure(f"useradd {TENANT_USER} exited {r.returncode}: {r.stderr}")
    return pw.pw_uid, pw.pw_gid


def run_cases(cases, argv=None):
    """main() of a test script: runs the case named on the command line."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(cases))
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args(argv)
    try:
        cases[a.case](Build(a.build_dir))
    except Failure as f:
        print(f"FAIL: {f}")
        return 1
    print("PASS")
    return 0


# ------------------------------------------------------------- the daemon ---

_PRIORITY = None


def fakegpu_env(build, tmp):
    """The environment of node processes and tenants on a fresh simulated H100
    whose state lives in `tmp`: this process's, less every CUSHARE_ variable
    (a test sets the ones it means)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSHARE_")}
    env.update(LD_LIBRARY_PATH=os.path.join(build, "fakegpu"),
               FAKEGPU_STATE=os.path.join(tmp, "fakegpu.state"),
               FAKEGPU_DEVICES="H100:80Gi:132", FAKEGPU_HOST_BACKING="0")
    return env


def priority_prefix():
    """The command prefix that raises a process's CPU priority: real-time
    round-robin (chrt -r 10) where allowed, else nice -10, else nothing.
    Scenario processes sleep almost all the time, and the simulated GPU runs
    in real time: on a loaded machine their wake-ups must not queue behind
    compilers."""
    global _PRIORITY
    if _PRIORITY is None:
        _PRIORITY = []
        for prefix in (["chrt", "-r", "10"], ["nice", "-n", "-10"]):
            try:
                if subprocess.run(prefix + ["true"], capture_output=True).returncode == 0:
                    _PRIORITY = prefix
                    break
            except OSError:
                pass
    return list(_PRIORITY)


def socket_accepts(run_dir):
    """Whether a daemon listens on run_dir's control socket (a socket left by
    a killed daemon refuses connections)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(os.path.join(run_dir, SOCKET_NAME))
        return True
    except OSError:
        return False
    finally:
        s.close()


class Daemon:
    """A cushared a test started (start_daemon)."""

    def __init__(self, popen, run_dir, log_path):
        self.popen = popen
        self.pid = popen.pid
        self.run_dir = run_dir
        self.log_path = log_path
        self.killed = False  # stop() had to SIGKILL it

    def alive(self):
        return self.popen.poll() is None

    @property
    def returncode(self):
        return self.popen.poll()

    def log(self, tail=4000):
        """The end of its log ("" without one)."""
        try:
            with open(self.log_path) as f:
                return f.read()[-tail:] if tail else f.read()
        except (OSError, TypeError):
            return ""

    def wait(self, timeout=None):
        return self.popen.wait(timeout=timeout)

    def kill(self):
        """kill -9, as a crash."""
        if self.alive():
            self.popen.kill()
        return self.popen.wait()

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after `timeout` s (self.killed says so); its exit status."""
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.killed = True
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


def start_daemon(binary, run_dir, args=(), env=None, log_path=None, priority=False,
                 ready="socket", timeout=10.0, preexec_fn=None, spawn=None, prefix=()):
    """Starts `binary --run-dir run_dir *args` and waits until it is ready.

    env: its environment (default: this process's). log_path: stdout and
    stderr go there (appended). priority: run it raised (priority_prefix()).
    ready: "socket" (its control socket accepts connections), a callable
    returning True once ready, or None (return at once). preexec_fn: as
    subprocess.Popen's. prefix: a command it runs under (e.g. setpriv with a
    narrowed capability set). spawn: a callable (argv, env) -> subprocess.Popen that
    starts it instead (a harness with its own process bookkeeping; log_path
    then only names where that puts the log).
    Raises Failure (with the log's end) when it exits or is not ready in time."""
    argv = ((priority_prefix() if priority else []) + list(prefix) +
            [binary, "--run-dir", run_dir] + list(args))
    if spawn is not None:
        popen = spawn(argv, env)
    else:
        if log_path is None:
            raise ValueError("start_daemon: a log_path or a spawn is needed")
        with open(log_path, "a") as log:
            popen = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     preexec_fn=preexec_fn)
    d = Daemon(popen, run_dir, log_path)
    if ready is None:
        return d
    is_ready = (lambda: socket_accepts(run_dir)) if ready == "socket" else ready
    deadline = time.monotonic() + timeout
    while not is_ready():
        if not d.alive():
            raise Failure(f"cushared exited with {d.returncode} at start:\n{d.log()}")
        if time.monotonic() > deadline:
            d.stop()
            raise Failure(f"cushared was not ready within {timeout:g} s:\n{d.log()}")
        time.sleep(0.02)
    return d


def refused_daemon(binary, run_dir, args=(), env=None, timeout=60):
    """A cushared expected to refuse to start (exit at once): (exit status,
    output). Raises Failure when it keeps running."""
    try:
        r = subprocess.run([binary, "--run-dir", run_dir] + list(args), env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failure(f"cushared {list(args)} on {run_dir} kept running")
    return r.returncode, r.stdout + r.stderr


class Build:
    def __init__(self, path):
        self.dir = os.path.abspath(path)
        self.bin = os.path.join(self.dir, "bin")
        self.fakegpu = os.path.join(self.dir, "fakegpu")
        self.samples = os.path.join(self.dir, "samples")
        self.preload_prefix = os.environ.get("CUSHARE_TEST_PRELOAD_PREFIX", "")
        self.lib = os.path.join(self.dir, "lib", "libcushare.so")

    def tool(self, name):
        return os.path.join(self.bin, name)

    def sample(self, name):
        return os.path.join(self.samples, name)


class Node:
    """A node: a temporary run dir, fakegpu state, optionally a cushared."""

    def __init__(self, build, devices="H100:80Gi:132", overhead="300Mi"):
        self.b = build
        self.tmp = tempfile.mkdtemp(prefix="cushare-node-")
        os.chmod(self.tmp, 0o755)  # tenants of other uids reach the fakegpu state
        self.run_dir = os.path.join(self.tmp, "run")
        os.makedirs(self.run_dir)
        self.state = os.path.join(self.tmp, "fakegpu.state")
        self.env = {
            "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
            "FAKEGPU_STATE": self.state,
            "FAKEGPU_DEVICES": devices,
            "FAKEGPU_CONTEXT_OVERHEAD": overhead,
            "FAKEGPU_HOST_BACKING": "0",
            "LD_LIBRARY_PATH": build.fakegpu,
        }
        for k, v in os.environ.items():  # sanitizer options of the build
            if k.startswith(("ASAN_", "UBSAN_", "TSAN_", "LSAN_")):
                self.env[k] = v
        self.daemon = None
        self.daemon_log_path = os.path.join(self.tmp, "cushared.log")
        self.procs = []
        self.stat()  # creates the state file
        os.chmod(self.state, 0o666)

    # ---- the daemon ----
    def start_daemon(self, *args, **options):
        """This node's cushared (start_daemon's options)."""
        self.daemon = start_daemon(self.b.tool("cushared"), self.run_dir, args, env=self.env,
                                   log_path=self.daemon_log_path, **options)
        return self.daemon

    def daemon_log(self):
        return self.daemon.log() if self.daemon else ""

    def daemon_alive(self):
        return self.daemon is not None and self.daemon.alive()

    # ---- allocations ----
    def create(self, name, *args):
        """`cusharectl create` (the managed layout for plain Docker)."""
        r = subprocess.run([self.b.tool("cusharectl"), "--run-dir", self.run_dir, "--json",
                            "create", name, *args], env=self.env, capture_output=True, text=True)
        check(r.returncode == 0, f"cusharectl create {name} exited {r.returncode}: {r.stderr}")
        return json.loads(r.stdout)["folder"]

    def return_gone_charges(self, folder=None):
        """`cusharectl status` on an allocation folder (default: the run dir
        as one), which without a daemon returns the charges of its processes
        that are gone: a process's memory stays charged through its exit."""
        r = subprocess.run([self.b.tool("cusharectl"), "--run-dir", folder or self.run_dir,
                            "status"], env=self.env, capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, f"cusharectl status exited {r.returncode}: {r.stderr}")

    # ---- ground truth ----
    def stat(self):
        r = subprocess.run([self.b.tool("fakegpu-stat"), "--json"], env=self.env,
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, f"fakegpu-stat failed: {r.stderr}")
        return json.loads(r.stdout)

    def device(self, index=0):
        return self.stat()["devices"][index]

    def wait_running(self, procs, device=0, timeout=30):
        """Until every process of `procs` (name -> Popen) has run on `device`
        (ground truth): a container and an instrumented shim can take over a
        second to start."""
        deadline = time.monotonic() + timeout
        while not all(busy_by_pid(self.device(device)).get(p.pid, 0) > 0 for p in procs.values()):
            check(time.monotonic() < deadline, f"{', '.join(procs)} never ran on GPU {device}")
            time.sleep(0.05)

    def shares(self, procs, window, device=0, settle=1.0):
        """Each process's share of wall time on `device` (percent, ground
        truth), and the device's ("device"), over `window` seconds after
        `settle`; measured again where a hypervisor took the host's CPU
        (tests/lib/cushare_timing.py). A process must live
        lifetime(window, settle) seconds. Returns cushare_timing.Measured."""
        time.sleep(settle)

        def sample():
            return time.monotonic(), self.device(device)

        def shares(before, after):
            (t0, d0), (t1, d1) = before, after
            span = (t1 - t0) * 1e9
            b0, b1 = busy_by_pid(d0), busy_by_pid(d1)
            out = {n: 100.0 * (b1.get(p.pid, 0) - b0.get(p.pid, 0)) / span for n, p in procs.items()}
            out["device"] = 100.0 * (d1["busy_ns"] - d0["busy_ns"]) / span
            return out

        return tm.measure(sample, shares, window, log=lambda m: print("  " + m, flush=True),
                          stall_probe=self.b.tool("host_stall_probe"))

    def reset_peak(self):
        """Restarts every device's memory high-water mark from the memory in use."""
        r = subprocess.run([self.b.tool("fakegpu-stat"), "--reset-peak"], env=self.env,
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, f"fakegpu-stat --reset-peak failed: {r.stderr}")

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.daemon is not None:
            self.daemon.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Sampler:
    """Ground truth of a device's memory while a workload runs. `peak` is
    exact: fakegpu keeps the device's high-water mark, restarted when the
    sampler starts, so no instant between samples escapes. The samples (at
    `period`) give `samples` and `series` for what a test wants to see over
    time."""

    def __init__(self, node, device=0, period=0.005):
        self.node, self.device, self.period = node, device, period
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _observe(self):
        dev = self.node.device(self.device)
        self.peak = max(self.peak, dev["memory_used"], dev["memory_used_peak"])
        self.samples += 1

    def _run(self):
        while not self._stop.is_set():
            try:
                self._observe()
            except Failure:
                pass
            time.sleep(self.period)

    def __enter__(self):
        self.node.reset_peak()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._observe()


class LineReader:
    """A process's output pipe, line by line, with a deadline: a bare
    readline() blocks for good on a process that hangs, and a process that
    ended gives "" where a caller wanted a line."""

    def __init__(self, stream):
        self._lines = queue.Queue()
        self._ended = False
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream):
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def line(self, deadline):
        """The next line; None once `deadline` (time.monotonic()) has passed
        or the output has ended."""
        if self._ended:
            return None
        try:
            line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None
        self._ended = line is None
        return line


def lifetime(window, settle=1.0):
    """`--seconds` for a tenant that Node.shares(window, settle) measures:
    its start, settling, and every window the host's steal may call for."""
    return f"{5 + settle + tm.WINDOWS * window:g}"


def busy_by_pid(dev):
    return {p["pid"]: p["busy_ns"] for p in dev["processes"]}


class Container:
    """Runs commands the way a container of `folder` (a cusharectl-created
    allocation of `node`) runs them. `uid`: the test user's by default; 0 for
    container root (with a container runtime's capabilities only)."""

    def __init__(self, node, folder, uid=None, preload=None, pid_ns=False):
        self.node = node
        self.folder = folder
        self.pid_ns = pid_ns  # a PID namespace of its own (popen's pid is then not the tenant's)
        # Sanitizer builds need their runtime preloaded first: LD_PRELOAD then.
        self.preload = preload or ("env" if node.b.preload_prefix else "file")
        if uid is None:
            uid, gid = tenant_user()
        else:
            gid = 0 if uid == 0 else uid
        self.uid, self.gid = uid, gid
        self.etc = os.path.join(node.tmp, f"etc-{os.path.basename(folder)}-{uid}")
        if not os.path.isdir(self.etc):
            with user_db_lock():
                r = subprocess.run(["cp", "-a", "/etc", self.etc], capture_output=True, text=True)
            if r.returncode != 0:
                raise Failure(f"cp -a /etc {self.etc} exited {r.returncode}: {r.stderr}")
            with open(os.path.join(self.etc, "ld.so.preload"), "w"):
                pass  # the mount point for the node's file

    def _script(self, argv, env):
        q = shlex.quote
        folder = q(self.folder)
        steps = [
            "set -e",
            "mount -t tmpfs -o mode=755 tmpfs /run",
            "mkdir -p /run/cushare",
            f"mount --bind {folder} /run/cushare",
            f"mount --bind {folder}/limits /run/cushare/limits",
            "mount -o remount,bind,ro /run/cushare/limits",
            f"mount --bind {q(self.etc)} /etc",
        ]
        # The library at its path in containers (a private /usr/local).
        lib_dir = os.path.dirname(CONTAINER_LIBRARY)
        steps += [
            "mount -t tmpfs -o mode=755 tmpfs /usr/local",
            f"mkdir -p {lib_dir}",
            f"touch {CONTAINER_LIBRARY}",
            f"mount --bind {q(self.node.b.lib)} {CONTAINER_LIBRARY}",
            f"mount -o remount,bind,ro {CONTAINER_LIBRARY}",
        ]
        if self.preload == "file":
            node_preload = os.path.join(self.node.run_dir, "ld.so.preload")
            steps += [f"mount --bind {q(node_preload)} /etc/ld.so.preload",
                      "mount -o remount,bind,ro /etc/ld.so.preload"]
        if self.uid == 0:
            caps = ",".join("+" + c for c in CONTAINER_ROOT_CAPS)
            user = ["setpriv", f"--bounding-set=-all,{caps}", f"--inh-caps=-all", "--"]
        else:
            user = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--"]
        envs = ["env", "-i"] + [f"{k}={v}" for k, v in env.items()]
        steps.append("exec " + " ".join(q(w) for w in user + envs + list(argv)))
        return "\n".join(steps)

    def env(self, extra=None):
        e = dict(self.node.env)
        e["CUSHARE_RUN_DIR"] = "/var/run/cushare"
        e["HOME"] = "/tmp"
        if self.preload == "env":
            e["LD_PRELOAD"] = self.node.b.preload_prefix + CONTAINER_LIBRARY
        for k, v in (extra or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e

    def popen(self, argv, extra=None, **kw):
        script = self._script(argv, self.env(extra))
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        # --kill-child: the namespace's processes die with unshare (a test that
        # kills the container must not leave its processes behind).
        ns = ["--pid", "--fork", "--kill-child", "--mount-proc"] if self.pid_ns else []
        p = subprocess.Popen(["unshare", "--mount", *ns, "--propagation", "private", "sh", "-c",
                              script], text=True, **kw)
        self.node.procs.append(p)
        return p

    def run(self, argv, extra=None, timeout=60):
        p = self.popen(argv, extra)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise Failure(f"{argv} timed out: {out} {err}")
        return p.returncode, out, err


def last_json(text):
    lines = [l for l in text.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None
