"""Everything a check needs: where the binaries are, how to start tenants
under the shim, the orchestrator's own NVML view, fakegpu ground truth, and
the process manager that guarantees cleanup."""

import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import cushare_test as ct  # tests/lib (see __init__.py)

from .nvml import Nvml, NvmlError
from .procs import Deadline, ProcessManager, Worker, WorkerFailed

GiB = 1 << 30
MiB = 1 << 20

# Variables that would change what a tenant does if inherited from the
# caller's shell: every tenant's configuration is stated explicitly.
_SCRUBBED_PREFIXES = ("CUSHARE_", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
                      "XLA_PYTHON_CLIENT_", "PYTORCH_CUDA_ALLOC_CONF", "TF_GPU_ALLOCATOR",
                      "PYTORCH_NO_CUDA_MEMORY_CACHING")
_SCRUBBED = ("LD_PRELOAD", "CUDA_VISIBLE_DEVICES", "XLA_FLAGS")


class Suite:
    def __init__(self, args, gpu: Dict[str, Any], frameworks: Dict[str, Any]):
        self.repo = os.path.abspath(args.repo)
        self.build_dir = os.path.abspath(args.build_dir)
        self.out_dir = os.path.abspath(args.out)
        self.quick = args.quick
        self.gpu = gpu
        self.frameworks = frameworks
        self.simulated = bool(args.fakegpu_stat)
        self.fakegpu_stat = args.fakegpu_stat
        self.shim = args.shim or os.path.join(self.build_dir, "lib", "libcushare.so")
        self.preload_prefix = args.preload_prefix or ""
        self.daemon_bin = os.path.join(self.build_dir, "bin", "cushared")
        self.probe_bin = os.path.join(self.build_dir, "bin", "cushare-gpu-probe")
        self.workers_dir = os.path.join(self.repo, "tests", "gpu", "workers")
        self.work_dir = args.work_dir
        self.log_dir = os.path.join(self.out_dir, "logs")
        self.procs = ProcessManager(self.log_dir, os.path.join(self.out_dir, ".pids"))
        self._dirs = 0
        self.nvml: Optional[Nvml] = None
        self.nvml_handle = None
        self.nvml_error: Optional[str] = None
        try:
            self.nvml = Nvml(args.libnvml)
            self.nvml_handle = self.nvml.handle(int(os.environ.get("CUSHARE_GPU_INDEX", "0")))
        except NvmlError as e:
            self.nvml, self.nvml_error = None, str(e)

    # -- what is available ----------------------------------------------------
    def missing_binaries(self, need_daemon: bool = False) -> Optional[str]:
        wanted = [self.shim, self.probe_bin] + ([self.daemon_bin] if need_daemon else [])
        missing = [p for p in wanted if not os.path.exists(p)]
        return ("not built: " + ", ".join(missing)) if missing else None

    def framework(self, name: str) -> Dict[str, Any]:
        """The framework's detection record, with available=False (and a
        reason) when it cannot be used here: not installed, or on fakegpu,
        which simulates the Driver API the shim sees, not a whole CUDA stack."""
        info = dict(self.frameworks.get(name) or {"available": False,
                                                  "reason": f"{name} was not probed"})
        if info.get("available") and self.simulated:
            info["available"] = False
            info["reason"] = (f"fakegpu run: {name} needs a real GPU (the simulator covers the "
                              "Driver API subset the shim uses, not a framework's CUDA stack)")
        return info

    # -- folders ----------------------------------------------------------------
    def new_dir(self, kind: str, name: str) -> str:
        self._dirs += 1
        d = os.path.join(self.work_dir, kind, f"{self._dirs:02d}-{name}")
        os.makedirs(d, exist_ok=True)
        return d

    def node_run_dir(self, name: str) -> str:
        """A daemon's run dir; allocations go in <it>/alloc/<id>/."""
        d = self.new_dir("node", name)
        os.makedirs(os.path.join(d, "alloc"), exist_ok=True)
        return d

    @staticmethod
    def alloc_dir(node_dir: str, alloc_id: str) -> str:
        # The shim creates the folder and its regions (standalone creation);
        # the daemon discovers it.
        return os.path.join(node_dir, "alloc", alloc_id)

    # -- environments -----------------------------------------------------------
    def base_env(self) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)}
        env["PYTHONUNBUFFERED"] = "1"
        if not self.simulated and self.gpu.get("uuid"):
            # Pin every CUDA process to the card NVML reads (device 0 = it).
            env["CUDA_VISIBLE_DEVICES"] = self.gpu["uuid"]
        return env

    def tenant_env(self, run_dir: Optional[str], memory: Optional[str] = None,
                   compute: Optional[int] = None, weight: Optional[int] = None,
                   mode: Optional[str] = None, shim: bool = True,
                   extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        env = self.base_env()
        if shim:
            env["LD_PRELOAD"] = self.preload_prefix + self.shim
            env["CUSHARE_RUN_DIR"] = run_dir or ""
            env["CUSHARE_LOG_LEVEL"] = os.environ.get("CUSHARE_GPU_SHIM_LOG_LEVEL", "info")
            if memory is not None:
                env["CUSHARE_MEMORY_LIMIT"] = str(memory)
            if compute is not None:
                env["CUSHARE_COMPUTE_LIMIT"] = str(compute)
            if weight is not None:
                env["CUSHARE_COMPUTE_WEIGHT"] = str(weight)
            if mode is not None:
                env["CUSHARE_COMPUTE_MODE"] = mode
        if extra:
            env.update(extra)
        return env

    # -- programs ---------------------------------------------------------------
    def probe(self, name: str, args: List[str], env: Dict[str, str]) -> Worker:
        return self.procs.spawn(name, [self.probe_bin] + args, env)

    def py_worker(self, name: str, framework: str, script: str, args: List[str],
                  env: Dict[str, str]) -> Worker:
        py = self.framework(framework).get("python") or sys.executable
        return self.procs.spawn(name, [py, os.path.join(self.workers_dir, script)] + args, env)

    def start_daemon(self, node_dir: str, deadline: Deadline) -> Worker:
        """cushared on node_dir, started by the test toolkit's launcher (ready
        once its control socket answers) as one of this suite's workers."""
        workers: List[Worker] = []

        def spawn(argv: List[str], env: Dict[str, str]) -> subprocess.Popen:
            workers.append(self.procs.spawn("cushared", argv, env))
            return workers[-1].popen

        try:
            ct.start_daemon(self.daemon_bin, node_dir, env=self.base_env(), spawn=spawn,
                            timeout=deadline.cap(10.0))
        except ct.Failure as e:
            output = workers[-1].last_output() if workers else ""
            raise WorkerFailed(f"{e} {output}".strip())
        return workers[-1]

    # -- ground truth -------------------------------------------------------------
    def nvml_memory(self) -> Optional[Dict[str, int]]:
        if self.nvml is None:
            return None
        try:
            return self.nvml.memory(self.nvml_handle)
        except NvmlError:
            return None

    def nvml_processes(self) -> Optional[Dict[int, int]]:
        if self.nvml is None:
            return None
        try:
            return self.nvml.processes(self.nvml_handle)
        except NvmlError as e:
            self.nvml_error = str(e)
            return None

    def process_memory(self, pid: int, device_baseline: Optional[int]) -> Dict[str, Any]:
        """NVML's used memory for one of our processes, read outside the quota.
        Falls back to the device-level increase over a baseline when NVML does
        not list the pid (a PID namespace between us and the driver)."""
        procs = self.nvml_processes()
        if procs is not None and pid in procs:
            return {"bytes": procs[pid], "source": "nvml per-process"}
        mem = self.nvml_memory()
        if mem is not None and device_baseline is not None:
            return {"bytes": mem["used"] - device_baseline,
                    "source": "nvml device used minus baseline (pid not listed)"}
        return {"bytes": None, "source": "nvml unavailable: " + str(self.nvml_error)}

    def fakegpu_snapshot(self) -> Optional[Dict[str, Any]]:
        if not self.fakegpu_stat:
            return None
        try:
            p = subprocess.run([self.fakegpu_stat, "--json"], capture_output=True, text=True,
                               timeout=10)
            snap = json.loads(p.stdout)
            snap["_t"] = time.monotonic()
            return snap
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return None
