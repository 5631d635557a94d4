"""NVML read from outside the shim: the orchestrator's independent view of the
GPU (device memory, per-process memory, per-process utilisation). Loaded with
ctypes by soname, so under fakegpu (LD_LIBRARY_PATH) it reads the simulator."""

import ctypes
import time
from typing import Dict, List, Optional

NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_NOT_FOUND = 6


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class _ProcessInfoV3(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _ProcessUtilSample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong),
                ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class NvmlError(Exception):
    pass


class Nvml:
    def __init__(self, library: str = "libnvidia-ml.so.1"):
        try:
            self.lib = ctypes.CDLL(library)
        except OSError as e:
            raise NvmlError(f"cannot load {library}: {e}")
        self._call("nvmlInit_v2")

    def _call(self, name: str, *args) -> int:
        fn = getattr(self.lib, name, None)
        if fn is None:
            raise NvmlError(f"NVML has no {name}")
        r = fn(*args)
        if r != NVML_SUCCESS:
            raise NvmlError(f"{name} failed: {self.error_string(r)}")
        return r

    def error_string(self, code: int) -> str:
        fn = getattr(self.lib, "nvmlErrorString", None)
        if fn is None:
            return f"NVML error {code}"
        fn.restype = ctypes.c_char_p
        s = fn(code)
        return f"{s.decode() if s else 'error'} ({code})"

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except Exception:
            pass

    # -- system ---------------------------------------------------------------
    def driver_version(self) -> Optional[str]:
        buf = ctypes.create_string_buffer(96)
        try:
            self._call("nvmlSystemGetDriverVersion", buf, ctypes.c_uint(96))
        except NvmlError:
            return None
        return buf.value.decode()

    def cuda_driver_version(self) -> Optional[int]:
        v = ctypes.c_int(0)
        for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
            try:
                self._call(name, ctypes.byref(v))
                return v.value
            except NvmlError:
                continue
        return None

    def device_count(self) -> int:
        n = ctypes.c_uint(0)
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(n))
        return n.value

    def handle(self, index: int):
        h = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(h))
        return h

    def name(self, h) -> str:
        buf = ctypes.create_string_buffer(96)
        self._call("nvmlDeviceGetName", h, buf, ctypes.c_uint(96))
        return buf.value.decode()

    def uuid(self, h) -> str:
        buf = ctypes.create_string_buffer(96)
        self._call("nvmlDeviceGetUUID", h, buf, ctypes.c_uint(96))
        return buf.value.decode()

    def memory(self, h) -> Dict[str, int]:
        m = _Memory()
        self._call("nvmlDeviceGetMemoryInfo", h, ctypes.byref(m))
        return {"total": m.total, "free": m.free, "used": m.used}

    def processes(self, h) -> Dict[int, int]:
        """host pid -> used device memory (context included)."""
        n = ctypes.c_uint(0)
        fn = self.lib.nvmlDeviceGetComputeRunningProcesses_v3
        r = fn(h, ctypes.byref(n), None)
        if r == NVML_SUCCESS and n.value == 0:
            return {}
        if r not in (NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE):
            raise NvmlError("nvmlDeviceGetComputeRunningProcesses_v3 failed: " + self.error_string(r))
        for _ in range(3):
            cap = n.value + 8
            arr = (_ProcessInfoV3 * cap)()
            n = ctypes.c_uint(cap)
            r = fn(h, ctypes.byref(n), arr)
            if r == NVML_SUCCESS:
                return {arr[i].pid: arr[i].usedGpuMemory for i in range(n.value)}
            if r != NVML_ERROR_INSUFFICIENT_SIZE:
                break
        raise NvmlError("nvmlDeviceGetComputeRunningProcesses_v3 failed: " + self.error_string(r))

    def utilization(self, h) -> Optional[int]:
        u = _Utilization()
        try:
            self._call("nvmlDeviceGetUtilizationRates", h, ctypes.byref(u))
        except NvmlError:
            return None
        return u.gpu

    def process_utilization(self, h, since_unix_s: float) -> Dict[int, List[int]]:
        """host pid -> SM utilisation samples (%) taken after since_unix_s."""
        since = ctypes.c_ulonglong(int(since_unix_s * 1e6))
        n = ctypes.c_uint(0)
        fn = self.lib.nvmlDeviceGetProcessUtilization
        r = fn(h, None, ctypes.byref(n), since)
        if r == NVML_ERROR_NOT_FOUND:
            return {}
        if r not in (NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE) or n.value == 0:
            if r == NVML_SUCCESS:
                return {}
            raise NvmlError("nvmlDeviceGetProcessUtilization failed: " + self.error_string(r))
        arr = (_ProcessUtilSample * (n.value + 16))()
        n = ctypes.c_uint(n.value + 16)
        r = fn(h, arr, ctypes.byref(n), since)
        if r == NVML_ERROR_NOT_FOUND:
            return {}
        if r != NVML_SUCCESS:
            raise NvmlError("nvmlDeviceGetProcessUtilization failed: " + self.error_string(r))
        out: Dict[int, List[int]] = {}
        for i in range(n.value):
            s = arr[i]
            if s.timeStamp >= since.value:
                out.setdefault(s.pid, []).append(s.smUtil)
        return out


class UtilizationSampler:
    """Collects per-process SM utilisation over a window by polling NVML
    (samples are kept by the driver for a short time only)."""

    def __init__(self, nvml: Nvml, handle):
        self.nvml, self.handle = nvml, handle
        self.samples: Dict[int, List[int]] = {}
        self._last = time.time()
        self.error: Optional[str] = None

    def poll(self) -> None:
        now = time.time()
        try:
            got = self.nvml.process_utilization(self.handle, self._last)
        except NvmlError as e:
            self.error = str(e)
            return
        for pid, values in got.items():
            self.samples.setdefault(pid, []).extend(values)
        self._last = now

    def mean_percent(self, pid: int) -> Optional[float]:
        values = self.samples.get(pid)
        return sum(values) / len(values) if values else None
