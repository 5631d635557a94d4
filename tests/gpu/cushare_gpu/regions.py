"""Read-only view of an allocation's `limits` and `usage` regions (layout v1,
shm/layout.hpp). The suite reads the shim's ledger directly so that its
verdicts do not depend on cusharectl; a region of another version is refused,
never guessed at."""

import os
import struct
from typing import Any, Dict, List, Optional

LAYOUT_VERSION = 1
MAX_GPUS = 16
MAX_SLOTS = 1024
LIMITS_MAGIC = 0x544D494C48535543
USAGE_MAGIC = 0x4741535548535543
UNLIMITED = (1 << 64) - 1

HEADER = 128
GPU_LIMITS = 128
GPU_USAGE = 128
SLOT = 320
LIMITS_SIZE = 256 + MAX_GPUS * GPU_LIMITS
USAGE_SIZE = 256 + MAX_GPUS * GPU_USAGE + MAX_SLOTS * SLOT
SLOTS_OFFSET = 256 + MAX_GPUS * GPU_USAGE
SLOT_ACTIVE = 2


class RegionError(Exception):
    pass


def _u64(b: bytes, off: int) -> int:
    return struct.unpack_from("<Q", b, off)[0]


def _u32(b: bytes, off: int) -> int:
    return struct.unpack_from("<I", b, off)[0]


def _read(path: str, magic: int, size: int) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(size + 1)
    except OSError as e:
        raise RegionError(f"cannot read {path}: {e}")
    if len(data) < HEADER:
        raise RegionError(f"{path}: too short ({len(data)} bytes)")
    if _u64(data, 0) != magic:
        raise RegionError(f"{path}: bad magic {_u64(data, 0):#x}")
    if _u32(data, 8) != LAYOUT_VERSION:
        raise RegionError(f"{path}: layout version {_u32(data, 8)}, this suite reads {LAYOUT_VERSION}")
    if _u64(data, 16) != size or len(data) != size:
        raise RegionError(f"{path}: size {len(data)} (header says {_u64(data, 16)}), expected {size}")
    return data


def _cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def read_limits(alloc_dir: str) -> Dict[str, Any]:
    b = _read(os.path.join(alloc_dir, "limits"), LIMITS_MAGIC, LIMITS_SIZE)
    count = min(_u32(b, 136), MAX_GPUS)
    gpus = []
    for i in range(count):
        o = 256 + i * GPU_LIMITS
        mem = _u64(b, o + 48)
        gpus.append({
            "uuid": _cstr(b[o:o + 48]),
            "memory_limit_bytes": None if mem == UNLIMITED else mem,
            "compute_limit_pct": _u32(b, o + 56),
            "weight": _u32(b, o + 60),
            "mode": "capped" if _u32(b, o + 64) == 1 else "burst",
            "lease_holder": _u32(b, o + 84),
            "lease_grants": _u64(b, o + 88),
            "granted_ns": _u64(b, o + 96),
            "share_target_ppm": _u32(b, o + 104),
            "share_achieved_ppm": _u32(b, o + 108),
            "handoffs": _u64(b, o + 112),
        })
    return {
        "alloc_id": _cstr(b[32:96]),
        "daemon_pid": _u32(b, 140),
        "daemon_heartbeat_ns": _u64(b, 144),
        "quantum_ns": _u64(b, 152),
        "gpus": gpus,
    }


def read_usage(alloc_dir: str) -> Dict[str, Any]:
    b = _read(os.path.join(alloc_dir, "usage"), USAGE_MAGIC, USAGE_SIZE)
    count = min(_u32(b, 128), MAX_GPUS)
    gpus = []
    for i in range(count):
        o = 256 + i * GPU_USAGE
        gpus.append({
            "used_bytes": _u64(b, o),
            "demand": _u32(b, o + 8),
            "launches": _u64(b, o + 32),
            "throttled_launches": _u64(b, o + 40),
            "throttled_ns": _u64(b, o + 48),
            "oom_refusals": _u64(b, o + 56),
            "busy_ns": _u64(b, o + 80),
        })
    slots: List[Dict[str, Any]] = []
    for s in range(MAX_SLOTS):
        o = SLOTS_OFFSET + s * SLOT
        state = _u32(b, o)
        if state == 0:
            continue
        slots.append({
            "slot": s,
            "state": state,
            "pid": _u32(b, o + 4),
            "host_pid": _u32(b, o + 24),
            "bytes": [_u64(b, o + 40 + 8 * g) for g in range(max(count, 1))],
            "overhead": [_u64(b, o + 168 + 8 * g) for g in range(max(count, 1))],
        })
    return {"gpus": gpus, "slots": slots}


def used_bytes(alloc_dir: str, gpu: int = 0) -> Optional[int]:
    """The allocation's ledger total on one GPU, None when unreadable."""
    try:
        u = read_usage(alloc_dir)
    except RegionError:
        return None
    return u["gpus"][gpu]["used_bytes"] if len(u["gpus"]) > gpu else 0


def active_slots(alloc_dir: str) -> List[Dict[str, Any]]:
    try:
        return [s for s in read_usage(alloc_dir)["slots"] if s["state"] == SLOT_ACTIVE]
    except RegionError:
        return []
