"""Unit tests of the GPU suite's pure parts: verdict logic, report rendering,
share arithmetic, region validation, and process-group cleanup."""

import json
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "gpu"))

from cushare_gpu import report, shares  # noqa: E402
from cushare_gpu.checks import CHECKS, memory, sampling, select, smi  # noqa: E402
from cushare_gpu.procs import Deadline, ProcessManager, TimeUp, WorkerFailed  # noqa: E402


class VerdictLogic(unittest.TestCase):
    def test_pass_needs_a_judged_measurement_and_no_failure(self):
        r = report.CheckResult("x", "t")
        r.measure("a", "1", 1, True)
        r.measure("b", "info", 2, None)
        self.assertEqual(r.settle().status, "pass")

    def test_one_failed_measurement_fails_the_check_and_is_named(self):
        r = report.CheckResult("x", "t")
        r.measure("a", "1", 1, True)
        r.measure("quota held", "<= 4", 5, False)
        r.settle()
        self.assertEqual(r.status, "fail")
        self.assertIn("quota held", r.reason)

    def test_nothing_judged_is_an_error_not_a_pass(self):
        r = report.CheckResult("x", "t")
        r.measure("a", "1", None, None)
        self.assertEqual(r.settle().status, "error")

    def test_skip_and_error_are_kept(self):
        self.assertEqual(report.CheckResult("x", "t").skip("torch missing").settle().status, "skip")
        self.assertEqual(report.CheckResult("x", "t").error("timed out").settle().status, "error")

    def test_summary_and_exit_codes(self):
        p = report.CheckResult("1", "a")
        p.measure("m", "", 1, True)
        p.settle()
        s = report.CheckResult("2", "b").skip("no torch")
        f = report.CheckResult("3", "c")
        f.measure("m", "", 1, False)
        f.settle()
        self.assertEqual(report.summarize([p, s])["verdict"], "pass")
        self.assertEqual(report.exit_code(report.summarize([p, s])), 0)
        self.assertEqual(report.summarize([p, s, f])["verdict"], "fail")
        self.assertEqual(report.exit_code(report.summarize([p, f])), 1)
        self.assertEqual(report.summarize([s])["verdict"], "skipped")
        self.assertEqual(report.exit_code(report.summarize([s])), 3)
        e = report.CheckResult("4", "d").error("crashed")
        self.assertEqual(report.summarize([p, e])["verdict"], "fail")

    def test_report_files(self):
        r = report.CheckResult("2e", "memory | driver")
        r.measure("total", "= 4 GiB", "4.000 GiB", True, note="a|b")
        r.settle()
        rep = report.build_report({"started": "now", "gpu": {"name": "H200"}}, [r])
        with tempfile.TemporaryDirectory() as d:
            report.write_report(d, rep)
            with open(os.path.join(d, "report.json")) as f:
                back = json.load(f)
            with open(os.path.join(d, "report.md")) as f:
                md = f.read()
        self.assertEqual(back["schema"], report.SCHEMA)
        self.assertEqual(back["checks"][0]["measurements"][0]["ok"], True)
        self.assertIn("| 2e | memory \\| driver | PASS |", md)
        self.assertIn("a\\|b", md)


class ShareArithmetic(unittest.TestCase):
    def test_rate_interpolates_within_the_window(self):
        pts = [(0.0, 0), (1.0, 100), (2.0, 300)]
        self.assertAlmostEqual(shares.rate(pts, 0.5, 1.5), 150.0)
        self.assertIsNone(shares.rate(pts, -1.0, 1.0))
        self.assertIsNone(shares.rate(pts, 1.0, 3.0))
        self.assertIsNone(shares.rate(pts, 1.0, 1.0))

    def test_progress_points_ignore_other_messages(self):
        msgs = [{"event": "ready"}, {"event": "progress", "t": 2, "n": 5},
                {"event": "progress", "t": 1, "n": 1}]
        self.assertEqual(shares.progress_points(msgs), [(1.0, 1.0), (2.0, 5.0)])

    def test_sampling_judges_only_readings_every_worker_covers(self):
        # A worker that began after the reader's first reading, and one that
        # stopped before its last: only the readings inside both are kept.
        readings = [{"from_ns": int(a * 1e9), "to_ns": int(b * 1e9)}
                    for a, b in ((0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0))]
        late = [(0.6, 0.0), (2.5, 10.0)]
        early_end = [(0.0, 0.0), (1.7, 10.0)]
        kept = sampling._within(readings, [late, early_end])
        self.assertEqual([m["from_ns"] for m in kept], [int(1.0e9)])
        self.assertEqual(sampling._within(readings, [late, []]), [])
        self.assertEqual(sampling._within(readings, [[(0.0, 0.0), (2.0, 1.0)]]), readings)

    def test_targets_and_errors(self):
        self.assertEqual(shares.burst_targets({"A": 1, "B": 3}), {"A": 0.25, "B": 0.75})
        self.assertEqual(shares.capped_targets({"A": 30, "B": 50}), {"A": 0.3, "B": 0.5})
        self.assertAlmostEqual(sum(shares.capped_targets({"A": 80, "B": 40}).values()), 1.0)
        self.assertEqual(shares.error_points(0.27, 0.25), 2.0)
        self.assertTrue(shares.within(0.29, 0.25, 5))
        self.assertFalse(shares.within(0.31, 0.25, 5))
        self.assertIsNone(shares.within(None, 0.25, 5))
        self.assertEqual(shares.median([3, 1, 2]), 2)
        self.assertEqual(shares.median([4, 1, 2, 3]), 2.5)
        self.assertIsNone(shares.ratio(1.0, 0))


class ProcessCleanup(unittest.TestCase):
    def test_cleanup_kills_whole_groups_and_waits_report_exits(self):
        with tempfile.TemporaryDirectory() as d:
            pm = ProcessManager(os.path.join(d, "logs"), os.path.join(d, ".pids"))
            # A worker whose child ignores SIGTERM and outlives its parent's exit.
            w = pm.spawn("tree", ["/bin/sh", "-c",
                                  "trap '' TERM; (trap '' TERM; sleep 60) & "
                                  "echo '@@cushare {\"event\":\"ready\"}'; sleep 60"], dict(os.environ))
            w.wait_event("ready", Deadline(10), 10)
            self.assertTrue(w.group_alive())
            self.assertEqual(pm.cleanup(), [])
            self.assertFalse(w.group_alive())
            with open(os.path.join(d, ".pids")) as f:
                self.assertEqual(f.read().split(), [str(w.pid)])

    def test_waits_fail_fast_on_exit_and_on_time(self):
        with tempfile.TemporaryDirectory() as d:
            pm = ProcessManager(os.path.join(d, "logs"), os.path.join(d, ".pids"))
            w = pm.spawn("quits", ["/bin/sh", "-c", "echo boom; exit 3"], dict(os.environ))
            with self.assertRaisesRegex(WorkerFailed, "exited with 3.*boom"):
                w.wait_event("ready", Deadline(10), 10)
            w2 = pm.spawn("silent", ["/bin/sleep", "30"], dict(os.environ))
            t0 = time.monotonic()
            with self.assertRaises(TimeUp):
                w2.wait_event("ready", Deadline(0.5), 10)
            self.assertLess(time.monotonic() - t0, 3)
            pm.cleanup()


class FrameworkJudgement(unittest.TestCase):
    """The verdicts of checks 1-2 from a worker's messages (as a GPU run sends them)."""
    GiB = 1 << 30

    def _torch(self, held, nvml_bytes, total=4 << 30, oom="OutOfMemoryError"):
        r = report.CheckResult("1", "t")
        got = {"mem_get_info_total": total, "oom_type": oom, "expected_oom": "OutOfMemoryError",
               "oom_message": "CUDA out of memory. Tried to allocate 256.00 MiB", "held": held,
               "reserved": held}
        memory.judge_framework(r, got, {"bytes": nvml_bytes, "source": "nvml per-process"})
        return r.settle()

    def test_torch_within_quota_passes(self):
        self.assertEqual(self._torch(int(3.5 * self.GiB), int(3.95 * self.GiB)).status, "pass")

    def test_torch_over_quota_or_wrong_total_or_error_type_fails(self):
        self.assertEqual(self._torch(int(4.2 * self.GiB), int(4.5 * self.GiB)).status, "fail")
        self.assertEqual(self._torch(int(3.5 * self.GiB), int(4.3 * self.GiB)).status, "fail")
        self.assertEqual(self._torch(int(3.5 * self.GiB), int(3.9 * self.GiB), total=80 << 30).status,
                         "fail")
        self.assertEqual(self._torch(int(3.5 * self.GiB), int(3.9 * self.GiB), oom="RuntimeError").status,
                         "fail")
        # Enforced but unusable: a quota that gives half of itself is a failure too.
        self.assertEqual(self._torch(2 * self.GiB, int(2.3 * self.GiB)).status, "fail")

    def test_jax_pool_sized_from_the_quota(self):
        def run(limit):
            r = report.CheckResult("2d", "t")
            memory.judge_jax(r, {"bytes_limit": limit, "computed": True, "platform": "gpu",
                                 "oom_type": "XlaRuntimeError", "held": int(2.9 * self.GiB),
                                 "oom_message": "RESOURCE_EXHAUSTED: Out of memory"},
                             {"bytes": int(3.6 * self.GiB), "source": "nvml per-process"})
            return r.settle().status
        self.assertEqual(run(int(0.75 * 4 * self.GiB)), "pass")
        self.assertEqual(run(int(0.75 * 141 * self.GiB)), "fail")

    def test_nvidia_smi_table_parsing(self):
        line = "| N/A   34C    P0   71W /  700W |     612MiB /   4096MiB |      0%      Default |"
        m = smi._TABLE_MEMORY.search(line)
        self.assertEqual((m.group(1), m.group(2)), ("612", "4096"))


class Registry(unittest.TestCase):
    def test_ids_are_unique_and_selection_validates(self):
        ids = [c.id for c in CHECKS]
        self.assertEqual(len(ids), len(set(ids)))
        self.assertEqual([c.id for c in select("5,1")], ["1", "5"])
        with self.assertRaisesRegex(ValueError, "unknown"):
            select("99")


if __name__ == "__main__":
    unittest.main()
