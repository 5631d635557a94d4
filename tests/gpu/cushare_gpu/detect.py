"""What this machine offers: a GPU and its driver, nvidia-smi, and which
Python has which framework. Driver probing runs in a child process (with a
timeout) so that a hung or crashing driver cannot take the suite down, and
nothing here runs under the shim."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

FRAMEWORKS = ("torch", "cupy", "jax", "triton")

_FRAMEWORK_PROBE = r"""
import json, sys
out = {"python": sys.executable, "python_version": sys.version.split()[0], "frameworks": {}}
for name in %r:
    try:
        mod = __import__(name)
        info = {"available": True, "version": getattr(mod, "__version__", "?")}
        if name == "torch":
            info["cuda"] = getattr(mod.version, "cuda", None)
        if name == "jax":
            try:
                import jaxlib
                info["jaxlib"] = jaxlib.__version__
            except Exception:
                pass
        out["frameworks"][name] = info
    except BaseException as e:
        out["frameworks"][name] = {"available": False, "reason": "%%s: %%s" %% (type(e).__name__, e)}
print("@@detect " + json.dumps(out))
""" % (FRAMEWORKS,)


def _driver_probe(libcuda: str, libnvml: str) -> Dict[str, Any]:
    """Runs in the child: what the driver and NVML say about device 0."""
    import ctypes
    out: Dict[str, Any] = {"available": False}
    try:
        cuda = ctypes.CDLL(libcuda)
    except OSError as e:
        out["reason"] = f"no NVIDIA driver: cannot load {libcuda} ({e})"
        return out
    r = cuda.cuInit(0)
    if r != 0:
        out["reason"] = f"cuInit failed with CUresult {r} (driver present but no usable GPU?)"
        return out
    n = ctypes.c_int(0)
    cuda.cuDeviceGetCount(ctypes.byref(n))
    if n.value < 1:
        out["reason"] = "the driver reports no CUDA device"
        return out
    dev = ctypes.c_int(0)
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    cuda.cuDeviceGetName(name, 256, dev)
    total = ctypes.c_size_t(0)
    cuda.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
    version = ctypes.c_int(0)
    cuda.cuDriverGetVersion(ctypes.byref(version))
    out.update(available=True, device_count=n.value, name=name.value.decode(),
               memory_total=total.value, cuda_driver_version=version.value)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from cushare_gpu.nvml import Nvml, NvmlError
    try:
        nvml = Nvml(libnvml)
        h = nvml.handle(int(os.environ.get("CUSHARE_GPU_INDEX", "0")))
        out.update(uuid=nvml.uuid(h), nvml_name=nvml.name(h), driver_version=nvml.driver_version(),
                   nvml_memory=nvml.memory(h))
        nvml.close()
    except NvmlError as e:
        out["nvml_error"] = str(e)
    return out


def detect_gpu(libcuda: str = "libcuda.so.1", libnvml: str = "libnvidia-ml.so.1",
               timeout: float = 30.0) -> Dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--driver", libcuda, libnvml]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"available": False, "reason": f"driver probe hung for {timeout:.0f} s"}
    for line in p.stdout.splitlines():
        if line.startswith("@@detect "):
            return json.loads(line[len("@@detect "):])
    return {"available": False,
            "reason": f"driver probe crashed (exit {p.returncode}): {p.stderr.strip()[-300:]}"}


def python_candidates() -> List[str]:
    forced = os.environ.get("CUSHARE_GPU_PYTHON")
    if forced:
        return [forced]
    seen, out = set(), []
    for c in (shutil.which("python3"), shutil.which("python"), sys.executable, "/usr/bin/python3"):
        if c and os.path.exists(c):
            real = os.path.realpath(c)
            if real not in seen:
                seen.add(real)
                out.append(c)
    return out


def detect_frameworks(timeout: float = 60.0) -> Dict[str, Dict[str, Any]]:
    """framework -> {available, version, python | reason}; the first Python
    (CUSHARE_GPU_PYTHON, else python3/python on PATH, then this one) wins.
    The candidates are probed in parallel, all within `timeout` seconds."""
    found: Dict[str, Dict[str, Any]] = {}
    tried: Dict[str, List[str]] = {f: [] for f in FRAMEWORKS}
    running = []
    for py in python_candidates():
        try:
            running.append((py, subprocess.Popen([py, "-c", _FRAMEWORK_PROBE], stdout=subprocess.PIPE,
                                                 stderr=subprocess.DEVNULL, text=True,
                                                 start_new_session=True)))
        except OSError as e:
            for f in FRAMEWORKS:
                tried[f].append(f"{py}: {e}")
    end = time.monotonic() + timeout
    for py, p in running:  # in preference order
        try:
            stdout, _ = p.communicate(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            for f in FRAMEWORKS:
                tried[f].append(f"{py}: importing the frameworks took over {timeout:.0f} s")
            continue
        info = None
        for line in stdout.splitlines():
            if line.startswith("@@detect "):
                info = json.loads(line[len("@@detect "):])
        if info is None:
            for f in FRAMEWORKS:
                tried[f].append(f"{py}: probe failed (exit {p.returncode})")
            continue
        for f, fi in info["frameworks"].items():
            if f in found:
                continue
            if fi.get("available"):
                found[f] = dict(fi, python=py, python_version=info["python_version"])
            else:
                tried[f].append(f"{py}: {fi.get('reason')}")
    for f in FRAMEWORKS:
        if f not in found:
            found[f] = {"available": False,
                        "reason": f"{f} is not installed in any Python tried ({'; '.join(tried[f]) or 'none found'})"}
    return found


def nvidia_smi() -> Optional[str]:
    return shutil.which("nvidia-smi")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--driver":
        print("@@detect " + json.dumps(_driver_probe(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps({"gpu": detect_gpu(), "frameworks": detect_frameworks(),
                          "nvidia_smi": nvidia_smi()}, indent=2))
