#!/usr/bin/python3
"""The scenario harness's checks can fail: each kind is judged on made-up
shares, on both sides of its bound, without running anything."""
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenario  # noqa: E402


class Checks(unittest.TestCase):
    def test_share_within_and_outside_its_tolerance(self):
        checks = [("share", "t1", 25, 2)]
        self.assertEqual(scenario.check({"t1": 26.9, "device": 99}, checks), [])
        self.assertEqual(len(scenario.check({"t1": 27.1, "device": 99}, checks)), 1)
        self.assertEqual(len(scenario.check({"t1": 22.9, "device": 99}, checks)), 1)

    def test_busy_max_is_judged_and_never_widened(self):
        checks = [("busy_max", "t1", 12)]
        self.assertEqual(scenario.check({"t1": 11.0, "device": 100}, checks), [])
        # 12.5 % of a half-busy device's time is 25 % of its busy time.
        failed = scenario.check({"t1": 12.5, "device": 50}, checks)
        self.assertEqual(len(failed), 1)
        self.assertIn("25.0 % of the busy time", failed[0])
        # A sanitizer build's slack widens other bounds, not this one.
        self.assertEqual(len(scenario.check({"t1": 13.0, "device": 100}, checks, slack=5)), 1)

    def test_busy_share_is_the_split_of_the_busy_time(self):
        checks = [("busy_share", "t1", 25, 2)]
        self.assertEqual(scenario.check({"t1": 22.5, "device": 90}, checks), [])
        self.assertEqual(len(scenario.check({"t1": 22.5, "device": 80}, checks)), 1)

    def test_min_and_device_floor(self):
        self.assertEqual(len(scenario.check({"t1": 94.0, "device": 94}, [("min", "t1", 95)])), 1)
        self.assertEqual(len(scenario.check({"device": 94}, [("device_min", 95)])), 1)
        self.assertEqual(scenario.check({"device": 96}, [("device_min", 95)]), [])

    def test_a_capped_tenant_is_held_to_its_peak(self):
        checks = [("share", "t1", 30, 2)]
        failed = scenario.check({"t1": 30.0, "device": 30}, checks, capped={"t1"}, peaks={"t1": 32.5})
        self.assertEqual(len(failed), 1)
        self.assertIn("up to 32.5", failed[0])

    def test_shaped_checks_keep_every_kind(self):
        tenants = [("t1", 10, "burst", "20000"), ("t2", 90, "burst", "5000")]
        checks = [("busy_max", "t1", 12), ("share", "t2", 90, 2)]
        for shape in scenario.SHAPES:
            shaped = scenario.shaped_checks(checks, tenants, shape)
            self.assertIn(("busy_max", "t1", 12), shaped, shape)

    def test_beside_an_alone_figure_the_acceptance_judges(self):
        burst = [("t1", 25, "burst", "1000"), ("t2", 75, "burst", "1000")]
        checks = [("share", "t1", 25, 3), ("share", "t2", 75, 3), ("device_min", 95)]
        # Every shape, async too: split of the busy time by weight ± 2, device >= alone - 2.
        shaped = scenario.shaped_checks(checks, burst, "async", alone=99.0)
        self.assertIn(("busy_share", "t1", 25, 2), shaped)
        self.assertIn(("device_min", 97.0), shaped)
        self.assertNotIn(("device_min", 95), shaped)
        self.assertEqual(len(scenario.check({"t1": 23.5, "t2": 72.5, "device": 96.0}, shaped)), 1)
        self.assertEqual(scenario.check({"t1": 24.5, "t2": 73.0, "device": 97.5}, shaped), [])
        # Without the figure, async keeps the scenario's tolerance and floor,
        # but judges the split of the busy time, not of the wall time.
        own = scenario.shaped_checks(checks, burst, "async")
        self.assertEqual(own, [("busy_share", "t1", 25, 3), ("busy_share", "t2", 75, 3),
                               ("device_min", 95)])
        # Weights 1:3 at 97.2 % busy, split right: the wall share alone failed it.
        self.assertEqual(scenario.check({"t1": 24.5, "t2": 72.7, "device": 97.2}, own), [])
        self.assertEqual(len(scenario.check({"t1": 20.0, "t2": 74.0, "device": 94.0}, own)), 3)

    def test_gapless_scenarios_without_a_split_keep_their_checks(self):
        stalled = [("t1", 10, "burst", "20000"), ("t2", 90, "burst", "5000")]
        self.assertEqual(scenario.shaped_checks([("busy_max", "t1", 12)], stalled, "async"),
                         [("busy_max", "t1", 12)])
        self.assertEqual(scenario.shaped_checks([("min", "t1", 96)], stalled[:1], "async"),
                         [("min", "t1", 96)])
        # A split is judged with the floor added where the scenario set none.
        shaped = scenario.shaped_checks([("share", "t1", 25, 2), ("share", "t2", 75, 2)],
                                        [("t1", 25, "burst"), ("t2", 75, "burst")], "async")
        self.assertIn(("device_min", 95), shaped)

    def test_a_host_slower_alone_lowers_the_floor_a_faster_one_raises_it(self):
        one = [("t1", 50, "burst", "1000")]
        slow = scenario.shaped_checks([("min", "t1", 95)], one, "hostgap", alone=59.1)
        self.assertEqual(slow, [("min", "t1", 57.1), ("device_min", 57.1)])
        fast = scenario.shaped_checks([("min", "t1", 95)], one, "sync1", alone=94.0)
        self.assertEqual(scenario.check({"t1": 91.0, "device": 91.0}, fast)[0],
                         "t1: 91.0 % below 92.0")

    def test_a_tenant_below_its_entitlement_is_owed_what_it_reaches_alone(self):
        burst = [("t1", 25, "burst", "1000"), ("t2", 75, "burst", "1000")]
        shaped = scenario.shaped_checks([("share", "t1", 25, 2), ("share", "t2", 75, 2)], burst,
                                        "hostgap", alone=60.0)
        self.assertIn(("share", "t2", 60.0, 3), shaped)
        self.assertIn(("share", "t1", 40.0, 3), shaped)

    def test_caps_are_judged_tenant_by_tenant_and_to_3_points_beside_hogs(self):
        capped = [("t1", 30, "capped", "1000"), ("t2", 50, "capped", "1000")]
        checks = [("share", "t1", 30, 2), ("share", "t2", 50, 2), ("device", 80, 3)]
        shaped = scenario.shaped_checks(checks, capped, "hostgap", alone=59.0)
        self.assertEqual(shaped, checks[:2])
        shares = {"t1": 27.5, "t2": 47.5, "device": 75.0}
        self.assertEqual(len(scenario.check(shares, shaped, capped={"t1", "t2"})), 2)
        self.assertEqual(scenario.check(shares, shaped, capped={"t1", "t2"}, cap_tol=3), [])
        self.assertEqual(scenario.check({"t1": 26.5, "device": 30}, [("share", "t1", 30, 2)],
                                        capped={"t1"}, cap_tol=3),
                         ["t1: 26.5 % not within 30 +- 3"])
        # Only caps: a burst tenant's share keeps its tolerance.
        self.assertEqual(len(scenario.check({"t3": 27.5, "device": 90}, [("share", "t3", 30, 2)],
                                            cap_tol=3)), 1)
        # Nor does it lift a cap's ceiling past 3 points.
        self.assertEqual(len(scenario.check({"t1": 33.5, "device": 40}, [("share", "t1", 30, 2)],
                                            capped={"t1"}, cap_tol=3)), 1)

    def test_on_two_gpus_each_is_judged_on_its_own(self):
        shares = {"device": 99.0, "t1": 24.5, "t2": 74.5,
                  "device@1": 99.0, "t1@1": 49.5, "t2@1": 49.5}
        self.assertEqual(scenario.one_gpu(shares, 1), {"device": 99.0, "t1": 49.5, "t2": 49.5})
        self.assertEqual(scenario.one_gpu({"t1", "t2@1"}, 0), {"t1"})
        env = scenario.Env(os.path.dirname(__file__), 10, False, shape="twogpus")
        try:
            failed = env.judge(shares, [("share", "t1", 25, 2), ("share", "t2", 75, 2)])
        finally:
            env.close()
        self.assertEqual(failed, ["GPU 1: t1: 49.5 % not within 25 +- 2",
                                  "GPU 1: t2: 49.5 % not within 75 +- 2"])


class StalledWindows(unittest.TestCase):
    """measure() takes a probe's stall figure as it takes steal: a window
    stalled beyond the limit is measured again, the last one judged; the
    probe here is a script that answers SIGTERM with a made-up figure. The
    host's own steal is left out (host_cpu_ticks made constant), and each
    window starts once its probe has its trap set (a loaded host can start
    the shell after the window's end): judged on the made-up figures alone,
    on any host."""

    def setUp(self):
        real = scenario.tm.host_cpu_ticks
        scenario.tm.host_cpu_ticks = lambda: [0] * 10  # no time passes: no steal measured
        self.addCleanup(setattr, scenario.tm, "host_cpu_ticks", real)

    def probe(self, stalled_ns, realtime="true"):
        d = tempfile.mkdtemp(prefix="stall-probe-")
        self.addCleanup(shutil.rmtree, d)
        path = os.path.join(d, "probe")
        line = (f'{{"realtime": {realtime}, "elapsed_ns": 1000000000, "stalled_ns": {stalled_ns}, '
                f'"longest_ns": 1}}')
        with open(path + ".json", "w") as f:
            f.write(line + "\n")
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\ntrap 'cat {path}.json; exit 0' TERM\n"
                    f"echo >> {path}.ready\n"
                    "while :; do sleep 0.01; done\n")
        os.chmod(path, 0o755)
        return path

    def measured(self, probe):
        said = []
        counter = iter(range(100))

        def sample():
            n = next(counter)
            if n % 2 == 0:  # a window's start: its probe, the (n/2+1)th, is ready
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    try:
                        with open(probe + ".ready") as f:
                            if len(f.readlines()) > n // 2:
                                break
                    except FileNotFoundError:
                        pass
                    time.sleep(0.005)
            return n

        m = scenario.tm.measure(sample, lambda a, b: {"n": b}, 0.2, log=said.append,
                                stall_probe=probe)
        return m, said

    def test_a_stalled_window_is_measured_again_and_the_last_judged(self):
        m, said = self.measured(self.probe(200_000_000))  # 20 % stalled
        self.assertEqual(len(m.windows), scenario.tm.WINDOWS)
        self.assertAlmostEqual(m.stall, 20.0)
        self.assertEqual(m.shares, m.windows[-1])
        self.assertIn("the last one is judged", said[-1])

    def test_a_quiet_window_is_judged_at_once(self):
        m, said = self.measured(self.probe(10_000_000))  # 1 %
        self.assertEqual(len(m.windows), 1)
        self.assertAlmostEqual(m.stall, 1.0)
        self.assertEqual(said, [])

    def test_a_probe_without_real_time_priority_is_said_and_ignored(self):
        scenario.tm._PROBE_MISSING_SAID = False
        m, said = self.measured(self.probe(900_000_000, realtime="false"))
        self.assertIsNone(m.stall)
        self.assertEqual(len(said), 1)
        self.assertIn("not measured", said[0])


if __name__ == "__main__":
    unittest.main()
