"""The test toolkit's one reader (and, for attacks, writer) of an allocation's
`limits` and `usage` regions: the binary layout of shm/layout.hpp, declared
here field by field in the order of the C++ structs.

Offsets are not written down: they follow from the field list by C's
alignment rules, as the compiler lays the structs out, and ctest
`shm.python_region_reader` compares every field's offset and size (and every
struct's size) with what the compiler says (tests/lib/layout_fields.cpp). A
field added to layout.hpp without its line here fails that test.

    r = Region.read(os.path.join(folder, "usage"))
    r.get("gpus", 0, "used_bytes")          # usage.gpus[0].used_bytes
    r.get("slots", 5, "bytes", 0)           # usage.slots[5].bytes[0]
    offset("usage", "gpus", 0, "demand")    # for code that writes raw bytes

Standard library only and Python 3.7+, so the real-GPU suite (tests/gpu) and
processes inside a test container can import it.
"""
import collections
import functools
import mmap
import os
import struct

LAYOUT_VERSION = 1
MAX_GPUS = 16
MAX_SLOTS = 1024
UUID_BYTES = 48
ALLOC_ID_BYTES = 64
LIMITS_MAGIC = 0x544D494C48535543  # "CUSHLIMT"
USAGE_MAGIC = 0x4741535548535543   # "CUSHUSAG"
UNLIMITED = (1 << 64) - 1

# The node run dir's names (shm/run_dir_layout.hpp).
SOCKET_NAME = "cushared.sock"
ALLOC_DIR_NAME = "alloc"
LIMITS_NAME = "limits"
USAGE_NAME = "usage"

# ComputeMode and SlotState.
MODE_BURST, MODE_CAPPED = 0, 1
SLOT_FREE, SLOT_CLAIMING, SLOT_ACTIVE, SLOT_RECLAIMING = 0, 1, 2, 3

# Scalar fields: struct format code -> (size, alignment). "s" is a char
# array (a NUL-terminated string), "B" a byte array (reserved bytes).
_SCALARS = {"Q": (8, 8), "I": (4, 4), "B": (1, 1), "s": (1, 1)}

Field = collections.namedtuple("Field", "name offset type count size")


class RegionError(Exception):
    """A region file that is not a region of this layout."""


class Struct:
    """A C struct: its fields in declaration order, laid out like the compiler."""

    def __init__(self, name, fields):
        self.name = name
        self.fields = collections.OrderedDict()
        offset, align = 0, 1
        for spec in fields:
            fname, ftype = spec[0], spec[1]
            count = spec[2] if len(spec) > 2 else 1
            fsize, falign = _SCALARS[ftype] if isinstance(ftype, str) else (ftype.size, ftype.align)
            offset = -(-offset // falign) * falign
            self.fields[fname] = Field(fname, offset, ftype, count, fsize * count)
            offset += fsize * count
            align = max(align, falign)
        self.align = align
        self.size = -(-offset // align) * align

    def field(self, name):
        try:
            return self.fields[name]
        except KeyError:
            raise KeyError("%s has no field %r" % (self.name, name)) from None


REGION_HEADER = Struct("RegionHeader", [
    ("magic", "Q"),
    ("layout_version", "I"),
    ("header_size", "I"),
    ("total_size", "Q"),
    ("created_unix_ns", "Q"),
    ("alloc_id", "s", ALLOC_ID_BYTES),
    ("creator_pid", "I"),
    ("flags", "I"),
    ("reserved", "B", 24),
])

GPU_LIMITS = Struct("GpuLimits", [
    ("uuid", "s", UUID_BYTES),
    ("memory_limit_bytes", "Q"),
    ("compute_limit_pct", "I"),
    ("weight", "I"),
    ("mode", "I"),
    ("over_quota_kills", "I"),
    ("lease_expiry_ns", "Q"),
    ("lease_futex", "I"),
    ("lease_holder", "I"),
    ("lease_grants", "Q"),
    ("granted_ns", "Q"),
    ("share_target_ppm", "I"),
    ("share_achieved_ppm", "I"),
    ("handoffs", "Q"),
    ("unleased_busy_ns", "Q"),
])

LIMITS_REGION = Struct("LimitsRegion", [
    ("header", REGION_HEADER),
    ("generation", "Q"),
    ("gpu_count", "I"),
    ("daemon_pid", "I"),
    ("daemon_heartbeat_ns", "Q"),
    ("quantum_ns", "Q"),
    ("ready_until_ns", "Q"),
    ("ready_gpus", "I"),
    ("reserved", "B", 84),
    ("gpus", GPU_LIMITS, MAX_GPUS),
])

GPU_USAGE = Struct("GpuUsage", [
    ("used_bytes", "Q"),
    ("demand", "I"),
    ("per_launch_us", "I"),
    ("last_submit_ns", "Q"),
    ("drained_ns", "Q"),
    ("launches", "Q"),
    ("throttled_launches", "Q"),
    ("throttled_ns", "Q"),
    ("oom_refusals", "Q"),
    ("last_oom_request_bytes", "Q"),
    ("last_oom_unix_ns", "Q"),
    ("busy_ns", "Q"),
    ("expected_drain_ns", "Q"),
    ("busy_processes", "I"),
    ("busy_epoch", "I"),
    ("resumed_ns", "Q"),
    ("context_overhead_seen", "Q"),
    ("idle_ns", "Q"),
])

PROCESS_SLOT = Struct("ProcessSlot", [
    ("state", "I"),
    ("pid", "I"),
    ("pidns_inode", "Q"),
    ("start_time", "Q"),
    ("host_pid", "I"),
    ("reserved0", "I"),
    ("heartbeat_ns", "Q"),
    ("bytes", "Q", MAX_GPUS),
    ("overhead", "Q", MAX_GPUS),
    ("busy_gpus", "I"),
    ("demand_gpus", "I"),
    ("memory_ops_begun", "Q"),
    ("memory_ops_ended", "Q"),
])

USAGE_REGION = Struct("UsageRegion", [
    ("header", REGION_HEADER),
    ("gpu_count", "I"),
    ("reserved0", "I"),
    ("reserved", "B", 120),
    ("gpus", GPU_USAGE, MAX_GPUS),
    ("slots", PROCESS_SLOT, MAX_SLOTS),
])

STRUCTS = (REGION_HEADER, GPU_LIMITS, LIMITS_REGION, GPU_USAGE, PROCESS_SLOT, USAGE_REGION)

# A region by its file name: (layout, magic).
KINDS = {LIMITS_NAME: (LIMITS_REGION, LIMITS_MAGIC), USAGE_NAME: (USAGE_REGION, USAGE_MAGIC)}
LIMITS_SIZE = LIMITS_REGION.size
USAGE_SIZE = USAGE_REGION.size


@functools.lru_cache(maxsize=None)
def locate(kind, *path):
    """(offset, field) of a field of region `kind` ("limits" or "usage"), named
    by a path of field names, each array field followed by an index:
    locate("usage", "slots", 3, "bytes", 0)."""
    layout = KINDS[kind][0] if isinstance(kind, str) else kind
    at, items = 0, list(path)
    while True:
        f = layout.field(items.pop(0))
        at += f.offset
        is_array = f.count > 1 and f.type != "s"
        if is_array and items and isinstance(items[0], int):
            index = items.pop(0)
            if not 0 <= index < f.count:
                raise IndexError("%s.%s[%d]: %d entries" % (layout.name, f.name, index, f.count))
            elem = f.size // f.count
            at += index * elem
            f = Field(f.name, f.offset, f.type, 1, elem)
        if not items:
            return at, f
        if isinstance(f.type, str):
            raise KeyError("%s.%s is not a struct" % (layout.name, f.name))
        layout = f.type


def offset(kind, *path):
    """The byte offset of a field in region `kind` (see locate)."""
    return locate(kind, *path)[0]


def _decode(buf, at, f):
    if isinstance(f.type, Struct) and f.count > 1:
        elem = f.size // f.count
        return [_decode(buf, at + i * elem, Field(f.name, f.offset, f.type, 1, elem))
                for i in range(f.count)]
    if isinstance(f.type, Struct):
        return {name: _decode(buf, at + sub.offset, sub) for name, sub in f.type.fields.items()
                if not name.startswith(("reserved", "unused"))}
    if f.type == "s":
        return bytes(buf[at:at + f.size]).split(b"\0", 1)[0].decode("utf-8", "replace")
    if f.type == "B":
        return bytes(buf[at:at + f.size])
    if f.count > 1:
        return list(struct.unpack_from("<%d%s" % (f.count, f.type), buf, at))
    return struct.unpack_from("<" + f.type, buf, at)[0]


class Region:
    """The bytes of one region: a snapshot (read) or the live file (mapped)."""

    def __init__(self, kind, buf, path="<bytes>"):
        self.kind, self.buf, self.path = kind, buf, path
        self.layout, self.magic = KINDS[kind]

    @classmethod
    def read(cls, path, kind=None, validate=True):
        """A snapshot of the region file at `path`; its kind is the file's name
        unless given. validate: refuse (RegionError) a file that is not a
        whole region of this layout (magic, version, sizes)."""
        kind = kind or os.path.basename(path)
        size = KINDS[kind][0].size
        try:
            with open(path, "rb") as f:
                data = f.read(size + 1)
        except OSError as e:
            raise RegionError("cannot read %s: %s" % (path, e))
        r = cls(kind, data, path)
        if validate:
            r.validate()
        return r

    @classmethod
    def map(cls, path, kind=None):
        """The live region file, mapped read-write (a tenant forging its own)."""
        fd = os.open(path, os.O_RDWR)
        try:
            return cls(kind or os.path.basename(path), mmap.mmap(fd, 0), path)
        finally:
            os.close(fd)

    def validate(self):
        size, n = self.layout.size, len(self.buf)
        if n < REGION_HEADER.size:
            raise RegionError("%s: too short (%d bytes)" % (self.path, n))
        magic = self.get("header", "magic")
        if magic != self.magic:
            raise RegionError("%s: bad magic %#x" % (self.path, magic))
        version = self.get("header", "layout_version")
        if version != LAYOUT_VERSION:
            raise RegionError("%s: layout version %d, the tests read %d"
                              % (self.path, version, LAYOUT_VERSION))
        total = self.get("header", "total_size")
        if total != size or n != size:
            raise RegionError("%s: size %d (header says %d), expected %d"
                              % (self.path, n, total, size))

    def get(self, *path):
        at, f = locate(self.kind, *path)
        return _decode(self.buf, at, f)

    def set(self, value, *path):
        """Writes one scalar field (the buffer must be writable: map())."""
        at, f = locate(self.kind, *path)
        if f.count != 1 or f.type not in ("Q", "I"):
            raise TypeError("%s: only scalar fields can be set" % (path,))
        struct.pack_into("<" + f.type, self.buf, at, value)

    def gpu_count(self):
        return min(self.get("gpu_count"), MAX_GPUS)

    def gpus(self):
        """Each GPU entry in use, as a dict of its fields."""
        return [self.get("gpus", i) for i in range(self.gpu_count())]

    def slots(self, states=(SLOT_CLAIMING, SLOT_ACTIVE, SLOT_RECLAIMING)):
        """usage only: {"slot": index, field: value...} of each slot in `states`."""
        state_at = offset("usage", "slots", 0, "state")
        out = []
        for i in range(MAX_SLOTS):
            if struct.unpack_from("<I", self.buf, state_at + i * PROCESS_SLOT.size)[0] in states:
                s = self.get("slots", i)
                s["slot"] = i
                out.append(s)
        return out

    def close(self):
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()


def read(folder, kind, validate=True):
    """Region.read of `folder`/`kind` ("limits" or "usage")."""
    return Region.read(os.path.join(folder, kind), kind, validate)


def used_bytes(folder, gpu=0):
    """The allocation's ledger total on one GPU; None when its usage region
    cannot be read, 0 for a GPU it has no entry for."""
    try:
        u = read(folder, "usage")
    except RegionError:
        return None
    return u.get("gpus", gpu, "used_bytes") if gpu < u.gpu_count() else 0


def active_slots(folder):
    """The active slots of the allocation's usage region ([] when unreadable)."""
    try:
        return read(folder, "usage").slots(states=(SLOT_ACTIVE,))
    except RegionError:
        return []
