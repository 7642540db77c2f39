#!/usr/bin/env python3
"""Tests the demo's judging (scripts/lib/demo.py) on made-up samples: which
shares meet a request, hold a limit, and keep the memory slice."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo  # noqa: E402

GIB = 1 << 30


def make_demo(seconds=20):
    d = demo.Demo(demo.parse_args(["--no-build", "--seconds", str(seconds)]))
    d.tmp = "/nonexistent"
    d.alloc_refused = True
    return d


def samples(seconds, shares, memory=None):
    """One sample a second; shares[group] = f(t) -> percent (the daemon's and
    the simulator's alike); busy time is the integral of it."""
    out, busy = [], {g: 0.0 for g in shares}
    for t in range(seconds + 1):
        groups = {}
        for g, f in shares.items():
            if t:
                busy[g] += f(t) / 100.0
            groups[g] = {"share": f(t), "memory_used": (memory or {}).get(g, GIB)}
        out.append({"t": float(t), "groups": groups, "busy": dict(busy), "clock": 100.0 + t,
                    "daemon_answered": True, "sim_share": {}})
    return out


def rows_by_span(d):
    return {(g, w): (api, sim, ok) for g, w, _, api, sim, ok in d.judge(d.tenants())}


class JudgeTest(unittest.TestCase):
    def good(self, change_at):
        return {"training": lambda t: 50.0,
                "notebook": lambda t: demo.NOTEBOOK_LIMIT if t < change_at + 1
                else demo.NOTEBOOK_LIMIT_LATER - 1,
                "inference": lambda t: 25.0}

    def test_every_target_met(self):
        d = make_demo()
        d.samples = samples(20, self.good(d.change_at))
        rows = rows_by_span(d)
        self.assertEqual(len(rows), 7)  # 3 tenants x 2 spans, and the memory slice
        for key, (api, sim, ok) in rows.items():
            self.assertTrue(ok, key)
        # The simulator's figure is the busy time over the span.
        api, sim, _ = rows[("training", "first half")]
        self.assertAlmostEqual(api, 50.0)
        self.assertAlmostEqual(sim, 50.0)

    def test_a_request_missed_by_more_than_the_tolerance(self):
        d = make_demo()
        shares = self.good(d.change_at)
        shares["training"] = lambda t: demo.TRAINING_REQUEST - demo.TOLERANCE - 1
        d.samples = samples(20, shares)
        rows = rows_by_span(d)
        self.assertFalse(rows[("training", "first half")][2])
        self.assertFalse(rows[("training", "second half")][2])
        self.assertTrue(rows[("inference", "first half")][2])

    def test_within_the_tolerance_is_met(self):
        d = make_demo()
        shares = self.good(d.change_at)
        shares["inference"] = lambda t: demo.INFERENCE_REQUEST - demo.TOLERANCE + 0.5
        d.samples = samples(20, shares)
        self.assertTrue(rows_by_span(d)[("inference", "first half")][2])

    def test_a_limit_exceeded(self):
        d = make_demo()
        shares = self.good(d.change_at)
        shares["notebook"] = lambda t: demo.NOTEBOOK_LIMIT + demo.TOLERANCE + 1
        d.samples = samples(20, shares)
        self.assertFalse(rows_by_span(d)[("notebook", "first half")][2])

    def test_a_live_change_that_did_not_apply_is_a_miss(self):
        d = make_demo()
        shares = self.good(d.change_at)
        shares["notebook"] = lambda t: demo.NOTEBOOK_LIMIT  # never rises to the new limit
        d.samples = samples(20, shares)
        rows = rows_by_span(d)
        self.assertTrue(rows[("notebook", "first half")][2])
        self.assertFalse(rows[("notebook", "second half")][2])

    def test_the_spans_leave_out_the_warm_up_after_the_change(self):
        d = make_demo()
        shares = self.good(d.change_at)
        # Far off in the seconds right after the change, on target after.
        shares["notebook"] = lambda t: (
            demo.NOTEBOOK_LIMIT if t <= d.change_at else
            90.0 if t < d.change_at + demo.WARMUP_S else demo.NOTEBOOK_LIMIT_LATER)
        d.samples = samples(20, shares)
        self.assertTrue(rows_by_span(d)[("notebook", "second half")][2])

    def test_memory_over_the_slice_or_an_allocation_let_through(self):
        d = make_demo()
        d.samples = samples(20, self.good(d.change_at),
                            memory={"notebook": demo.NOTEBOOK_MEMORY_BYTES + 1})
        self.assertFalse(rows_by_span(d)[("notebook", "memory")][2])
        d.samples = samples(20, self.good(d.change_at))
        d.alloc_refused = False
        self.assertFalse(rows_by_span(d)[("notebook", "memory")][2])

    def test_no_readings_is_a_miss(self):
        d = make_demo()
        d.samples = samples(20, self.good(d.change_at))
        for s in d.samples:
            s["groups"]["inference"]["share"] = None
        self.assertFalse(rows_by_span(d)[("inference", "first half")][2])


class ArgsTest(unittest.TestCase):
    def test_bad_seconds_and_unknown_flags_exit_2(self):
        for argv in (["--seconds", "3"], ["--seconds", "x"], ["--frobnicate"]):
            with self.assertRaises(SystemExit) as e:
                with open(os.devnull, "w") as null:
                    saved, sys.stderr = sys.stderr, null
                    try:
                        demo.parse_args(argv)
                    finally:
                        sys.stderr = saved
            self.assertEqual(e.exception.code, 2, argv)


if __name__ == "__main__":
    unittest.main()
