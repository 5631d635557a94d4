#!/usr/bin/python3
"""The scenario harness's checks can fail: each kind is judged on made-up
shares, on both sides of its bound, without running anything."""
import os
import sys
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


if __name__ == "__main__":
    unittest.main()
