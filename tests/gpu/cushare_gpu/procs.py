"""Starting, talking to and always cleaning up the suite's processes.

Every process runs in its own session (so its whole process group can be
signalled), is recorded in a registry file that run.sh reads to kill
leftovers even if the orchestrator itself dies, and speaks the suite's line
protocol: JSON messages on stdout prefixed with "@@cushare ", commands
("go", "release") on stdin.
"""

import collections
import json
import os
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Optional

PREFIX = "@@cushare "


class TimeUp(Exception):
    """A wait ran into the check's time budget."""


class WorkerFailed(Exception):
    """A worker exited or reported an error before sending what was awaited."""


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def cap(self, timeout: float) -> float:
        """timeout, shortened to the budget; raises TimeUp when none is left."""
        left = self.remaining()
        if left <= 0:
            raise TimeUp("time budget exhausted")
        return min(timeout, left)


class Worker:
    def __init__(self, name: str, argv: List[str], env: Dict[str, str], log_dir: str):
        self.name = name
        self.argv = argv
        self.messages: List[Dict[str, Any]] = []
        self.tail = collections.deque(maxlen=40)
        self._cond = threading.Condition()
        os.makedirs(log_dir, exist_ok=True)
        self.log_path = os.path.join(log_dir, name + ".log")
        self._log = open(self.log_path, "w")
        self._log.write("$ " + " ".join(argv) + "\n")
        self._log.flush()
        self.started = time.monotonic()
        self.popen = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        self._reader = threading.Thread(target=self._read, name="read-" + name, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in iter(self.popen.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._log.write(line + "\n")
            self._log.flush()
            if line.startswith(PREFIX):
                try:
                    msg = json.loads(line[len(PREFIX):])
                except ValueError:
                    self.tail.append(line)
                    continue
                msg.setdefault("_arrived", time.monotonic())
                with self._cond:
                    self.messages.append(msg)
                    self._cond.notify_all()
            else:
                self.tail.append(line)
        with self._cond:
            self._cond.notify_all()

    # -- protocol -----------------------------------------------------------
    def send(self, line: str) -> None:
        try:
            self.popen.stdin.write((line + "\n").encode())
            self.popen.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def events(self, event: str) -> List[Dict[str, Any]]:
        with self._cond:
            return [m for m in self.messages if m.get("event") == event]

    def wait_event(self, event: str, deadline: Deadline, timeout: float,
                   where: Optional[Callable[[Dict[str, Any]], bool]] = None) -> Dict[str, Any]:
        """The first message `event` (matching `where`); raises on exit, error or time."""
        limit = time.monotonic() + deadline.cap(timeout)
        with self._cond:
            while True:
                for m in self.messages:
                    if m.get("event") == event and (where is None or where(m)):
                        return m
                errors = [m for m in self.messages if m.get("event") == "error"]
                if errors:
                    raise WorkerFailed(f"{self.name}: {errors[0].get('message')}")
                if self.popen.poll() is not None and not self._reader.is_alive():
                    raise WorkerFailed(
                        f"{self.name} exited with {self.popen.returncode} before '{event}': "
                        + self.last_output())
                left = limit - time.monotonic()
                if left <= 0:
                    if deadline.remaining() <= 0:
                        raise TimeUp(f"time budget exhausted waiting for {self.name} '{event}'")
                    raise TimeUp(f"{self.name} sent no '{event}' within {timeout:.0f} s: "
                                 + self.last_output())
                self._cond.wait(min(left, 0.2))

    def last_output(self, lines: int = 6) -> str:
        tail = list(self.tail)[-lines:]
        return " / ".join(tail) if tail else "(no output)"

    # -- lifetime -------------------------------------------------------------
    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_exit(self, timeout: float) -> Optional[int]:
        try:
            return self.popen.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None

    def kill9(self) -> None:
        """SIGKILL to the process itself (what `kill -9 <pid>` does)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def stop(self, grace: float = 3.0) -> Optional[int]:
        """Asks politely (release, end of input), then TERM, then KILL the group."""
        if self.alive():
            self.send("release")
            try:
                self.popen.stdin.close()
            except OSError:
                pass
            if self.wait_exit(grace) is None:
                self.signal_group(signal.SIGTERM)
                if self.wait_exit(2.0) is None:
                    self.signal_group(signal.SIGKILL)
                    self.wait_exit(2.0)
        # Children that outlived the leader still belong to its group.
        if self.group_alive():
            self.signal_group(signal.SIGKILL)
            end = time.monotonic() + 2.0
            while time.monotonic() < end and self.group_alive():
                time.sleep(0.05)
        self._reader.join(timeout=2.0)
        return self.popen.returncode


class ProcessManager:
    """Owns every process the suite starts; cleanup() leaves nothing behind."""

    def __init__(self, log_dir: str, registry_path: str):
        self.log_dir = log_dir
        self.registry_path = registry_path
        self.workers: List[Worker] = []
        self._lock = threading.Lock()
        self._names = collections.Counter()

    def spawn(self, name: str, argv: List[str], env: Dict[str, str]) -> Worker:
        with self._lock:
            self._names[name] += 1
            unique = name if self._names[name] == 1 else f"{name}-{self._names[name]}"
            w = Worker(unique, argv, env, self.log_dir)
            self.workers.append(w)
            with open(self.registry_path, "a") as f:
                f.write(f"{w.pid}\n")
            return w

    def stop_all(self, workers: Optional[List[Worker]] = None) -> None:
        for w in list(workers if workers is not None else self.workers):
            w.stop()

    def cleanup(self) -> List[int]:
        """Kills every group still alive; returns the pids that would not die."""
        for w in self.workers:
            if w.alive() or w.group_alive():
                w.signal_group(signal.SIGTERM)
        end = time.monotonic() + 2.0
        while time.monotonic() < end and any(w.group_alive() for w in self.workers):
            time.sleep(0.05)
        for w in self.workers:
            if w.group_alive():
                w.signal_group(signal.SIGKILL)
        for w in self.workers:
            w.wait_exit(2.0)
        # Orphaned members die asynchronously after SIGKILL (and are reaped
        # by init): give them a moment before calling them leftovers.
        end = time.monotonic() + 3.0
        while time.monotonic() < end and any(w.group_alive() for w in self.workers):
            time.sleep(0.05)
        return [w.pid for w in self.workers if w.group_alive()]
