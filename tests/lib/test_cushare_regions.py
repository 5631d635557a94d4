#!/usr/bin/python3
"""ctest shm.python_region_reader: the test toolkit's region reader
(cushare_regions.py) against the compiler's layout of shm/layout.hpp, and its
refusal of files that are not regions of this layout.

Usage: test_cushare_regions.py LAYOUT_FIELDS_BINARY [unittest options]
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cushare_regions as cr  # noqa: E402

LAYOUT_FIELDS = None  # the binary that prints the compiler's layout (argv[1])


class LayoutMatchesTheCompiler(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        out = subprocess.run([LAYOUT_FIELDS], capture_output=True, text=True, check=True).stdout
        cls.cxx = json.loads(out)

    def test_every_struct_and_field(self):
        self.assertEqual(sorted(s.name for s in cr.STRUCTS),
                         sorted(k for k in self.cxx if k not in ("constants", "names")))
        for s in cr.STRUCTS:
            cxx = self.cxx[s.name]
            with self.subTest(struct=s.name):
                self.assertEqual(s.size, cxx["size"], "sizeof(%s)" % s.name)
                py = {f.name: [f.offset, f.size] for f in s.fields.values()}
                self.assertEqual(list(py), list(cxx["fields"]),
                                 "fields of %s (in declaration order)" % s.name)
                for name, where in cxx["fields"].items():
                    self.assertEqual(py[name], where,
                                     "%s.%s: [offset, size] here vs. the compiler" % (s.name, name))

    def test_constants(self):
        c = self.cxx["constants"]
        self.assertEqual((cr.LAYOUT_VERSION, cr.MAX_GPUS, cr.MAX_SLOTS, cr.UUID_BYTES,
                          cr.ALLOC_ID_BYTES, cr.LIMITS_MAGIC, cr.USAGE_MAGIC),
                         (c["layout_version"], c["max_gpus"], c["max_slots"], c["uuid_bytes"],
                          c["alloc_id_bytes"], c["limits_magic"], c["usage_magic"]))

    def test_run_dir_names(self):
        n = self.cxx["names"]
        self.assertEqual((cr.SOCKET_NAME, cr.ALLOC_DIR_NAME, cr.LIMITS_NAME, cr.USAGE_NAME),
                         (n["socket"], n["alloc"], n["limits"], n["usage"]))


def write_region(folder, kind, magic, version, total, length):
    data = bytearray(length)
    struct.pack_into("<QIIQ", data, 0, magic, version, 128, total)
    with open(os.path.join(folder, kind), "wb") as f:
        f.write(data)
    return data


class Reader(unittest.TestCase):
    def test_paths(self):
        self.assertEqual(cr.offset("limits", "gpus", 0, "lease_holder"), 256 + 84)
        self.assertEqual(cr.offset("usage", "gpus", 1, "drained_ns"), 256 + 128 + 24)
        self.assertEqual(cr.offset("usage", "slots", 2, "bytes", 3),
                         256 + 16 * 128 + 2 * 320 + 40 + 3 * 8)
        with self.assertRaises(IndexError):
            cr.offset("usage", "gpus", 16, "demand")
        with self.assertRaises(KeyError):
            cr.offset("usage", "gpus", 0, "no_such_field")

    def test_foreign_or_wrong_regions_are_refused(self):
        with tempfile.TemporaryDirectory() as d:
            write_region(d, "usage", 0x1234, 1, cr.USAGE_SIZE, cr.USAGE_SIZE)
            with self.assertRaisesRegex(cr.RegionError, "magic"):
                cr.read(d, "usage")
            write_region(d, "usage", cr.USAGE_MAGIC, 2, cr.USAGE_SIZE, cr.USAGE_SIZE)
            with self.assertRaisesRegex(cr.RegionError, "version"):
                cr.read(d, "usage")
            write_region(d, "usage", cr.USAGE_MAGIC, 1, cr.USAGE_SIZE, 4096)
            with self.assertRaisesRegex(cr.RegionError, "size"):
                cr.read(d, "usage")
            self.assertIsNone(cr.used_bytes(d))
            self.assertEqual(cr.active_slots(d), [])
            write_region(d, "limits", cr.USAGE_MAGIC, 1, cr.LIMITS_SIZE, cr.LIMITS_SIZE)
            with self.assertRaisesRegex(cr.RegionError, "magic"):
                cr.read(d, "limits")

    def test_ledger_slots_and_writes(self):
        with tempfile.TemporaryDirectory() as d:
            data = write_region(d, "usage", cr.USAGE_MAGIC, 1, cr.USAGE_SIZE, cr.USAGE_SIZE)
            # Written at the offsets layout.hpp asserts, not through the reader.
            struct.pack_into("<I", data, 128, 1)                       # gpu_count
            struct.pack_into("<Q", data, 256, 3 << 30)                 # gpus[0].used_bytes
            struct.pack_into("<Q", data, 256 + 32, 7)                  # gpus[0].launches
            slot = 256 + 16 * 128 + 5 * 320
            struct.pack_into("<II", data, slot, cr.SLOT_ACTIVE, 4242)  # state, pid
            struct.pack_into("<Q", data, slot + 40, 1 << 30)           # bytes[0]
            with open(os.path.join(d, "usage"), "wb") as f:
                f.write(data)
            self.assertEqual(cr.used_bytes(d), 3 << 30)
            self.assertEqual(cr.used_bytes(d, gpu=1), 0)
            u = cr.read(d, "usage")
            self.assertEqual(u.gpus()[0]["launches"], 7)
            self.assertEqual([(s["slot"], s["pid"], s["bytes"][0]) for s in cr.active_slots(d)],
                             [(5, 4242, 1 << 30)])
            m = cr.Region.map(os.path.join(d, "usage"))
            m.set(9, "gpus", 0, "demand")
            m.close()
            self.assertEqual(cr.read(d, "usage").get("gpus", 0, "demand"), 9)
            with open(os.path.join(d, "usage"), "rb") as f:
                self.assertEqual(struct.unpack_from("<I", f.read(), 256 + 8)[0], 9)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    LAYOUT_FIELDS = sys.argv.pop(1)
    unittest.main(verbosity=2)
