#!/usr/bin/env python3
"""Tests the demo's judging (scripts/lib/demo.py) on made-up samples: that
each promise is judged by the simulator's figure (SIM), a request met at
request - 2, a wanted cap sat within 2 points, gpusliced's reading within 3
points of SIM, and the memory slice kept; and that a miss says why."""
import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo  # noqa: E402

GIB = 1 << 30
TOL = demo.SHARE_TOLERANCE


def make_demo(seconds=20):
    d = demo.Demo(demo.parse_args(["--no-build", "--seconds", str(seconds)]))
    d.tmp = "/nonexistent"
    d.alloc_refused = True
    return d


def samples(seconds, sim, daemon=None, memory=None):
    """One sample a second. sim[group](t): the simulator's share over the
    second before t (its busy time is the integral); daemon[group](t):
    gpusliced's reading at t (default: the same as SIM)."""
    daemon = daemon or {}
    out, busy = [], {g: 0.0 for g in sim}
    for t in range(seconds + 1):
        groups = {}
        for g, f in sim.items():
            if t:
                busy[g] += f(t) / 100.0
            reading = daemon.get(g, f)(t)
            groups[g] = {"share": reading, "memory_used": (memory or {}).get(g, GIB)}
        out.append({"t": float(t), "groups": groups, "busy": dict(busy), "clock": 100.0 + t,
                    "daemon_answered": True, "sim_share": {}})
    return out


def rows_by_span(d):
    return {(r.group, r.span): r for r in d.judge(d.tenants())}


class JudgeTest(unittest.TestCase):
    def good(self, change_at):
        return {"training": lambda t: 50.0,
                "notebook": lambda t: demo.NOTEBOOK_LIMIT if t < change_at + 1
                else demo.NOTEBOOK_LIMIT_LATER - 1,
                "inference": lambda t: 25.0}

    def judged(self, sim, daemon=None, memory=None):
        d = make_demo()
        full = self.good(d.change_at)
        full.update(sim(d) if callable(sim) else sim)
        d.samples = samples(20, full, daemon, memory)
        return d, rows_by_span(d)

    def test_every_promise_kept(self):
        _, rows = self.judged({})
        self.assertEqual(len(rows), 7)  # 3 tenants x 2 spans, and the memory slice
        for key, r in rows.items():
            self.assertTrue(r.ok, (key, r.misses))
        # SIM is the busy time over the span's simulation clock.
        r = rows[("training", "first half")]
        self.assertAlmostEqual(r.sim, 50.0)
        self.assertAlmostEqual(r.daemon, 50.0)

    def test_a_request_is_judged_by_sim_not_by_the_daemon(self):
        want = demo.TRAINING_REQUEST
        # gpusliced reads the request as met; the ground truth says otherwise.
        _, rows = self.judged({"training": lambda t: want - TOL - 0.5},
                              daemon={"training": lambda t: want + 0.5})
        r = rows[("training", "first half")]
        self.assertFalse(r.ok)
        self.assertEqual(r.misses, [f"SIM below {want - TOL:g}%"])
        # And the other way round: the truth meets it, gpusliced reads less
        # (within its own tolerance): kept.
        _, rows = self.judged({"training": lambda t: want},
                              daemon={"training": lambda t: want - 2.5})
        self.assertTrue(rows[("training", "first half")].ok)

    def test_a_request_is_met_at_request_minus_two(self):
        want = demo.INFERENCE_REQUEST
        _, rows = self.judged({"inference": lambda t: want - TOL + 0.1})
        self.assertTrue(rows[("inference", "first half")].ok)
        _, rows = self.judged({"inference": lambda t: want - TOL - 0.1})
        self.assertFalse(rows[("inference", "first half")].ok)
        self.assertFalse(rows[("inference", "second half")].ok)
        self.assertTrue(rows[("training", "first half")].ok)

    def test_a_wanted_cap_is_sat_within_two_points(self):
        cap = demo.NOTEBOOK_LIMIT
        for sim, ok, why in ((cap - TOL + 0.5, True, None), (cap + TOL - 0.5, True, None),
                             (cap - TOL - 0.5, False, f"SIM below {cap - TOL:g}%"),
                             (cap + TOL + 0.5, False, f"SIM above {cap + TOL:g}%")):
            _, rows = self.judged({"notebook": lambda t, v=sim: v})
            r = rows[("notebook", "first half")]
            self.assertEqual(r.ok, ok, (sim, r.misses))
            if why:
                self.assertEqual(r.misses, [why])

    def test_a_live_change_that_did_not_apply_is_a_miss(self):
        _, rows = self.judged({"notebook": lambda t: demo.NOTEBOOK_LIMIT})
        self.assertTrue(rows[("notebook", "first half")].ok)
        self.assertFalse(rows[("notebook", "second half")].ok)

    def test_the_spans_leave_out_the_warm_up_after_the_change(self):
        def notebook(d):
            # Far off in the seconds right after the change, on target after.
            return {"notebook": lambda t: (
                demo.NOTEBOOK_LIMIT if t <= d.change_at else
                90.0 if t <= d.change_at + demo.WARMUP_S else demo.NOTEBOOK_LIMIT_LATER)}
        _, rows = self.judged(notebook)
        r = rows[("notebook", "second half")]
        self.assertTrue(r.ok, r.misses)

    def test_the_daemon_more_than_three_points_from_sim_is_a_miss(self):
        tol = demo.READING_TOLERANCE
        _, rows = self.judged({}, daemon={"training": lambda t: 50.0 + tol + 0.5})
        r = rows[("training", "first half")]
        self.assertFalse(r.ok)
        self.assertEqual(r.misses, [f"DAEMON {tol + 0.5:.1f} points from SIM"])
        _, rows = self.judged({}, daemon={"training": lambda t: 50.0 - tol + 0.1})
        self.assertTrue(rows[("training", "first half")].ok)

    def test_memory_over_the_slice_or_an_allocation_let_through(self):
        _, rows = self.judged({}, memory={"notebook": demo.NOTEBOOK_MEMORY_BYTES + 1})
        self.assertFalse(rows[("notebook", "peak")].ok)
        d, _ = self.judged({})
        d.alloc_refused = False
        self.assertEqual(rows_by_span(d)[("notebook", "peak")].misses,
                         ["an allocation past the slice was not refused"])

    def test_no_figures_is_a_miss(self):
        d, _ = self.judged({})
        for s in d.samples:
            s["groups"]["inference"]["share"] = None
            s["busy"]["training"] = None
        rows = rows_by_span(d)
        self.assertEqual(rows[("inference", "first half")].misses, ["no reading from gpusliced"])
        self.assertEqual(rows[("training", "first half")].misses, ["no figure from the simulator"])

    def test_the_summary_says_what_missed_and_why(self):
        d, _ = self.judged({"notebook": lambda t: 1.5})
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            lines = d.summary(d.tenants(), d.judge(d.tenants()))
        row = [line for line in lines if "notebook" in line and "first half" in line]
        self.assertEqual(len(row), 1)
        self.assertRegex(row[0], r"1\.5% +1\.5% +MISS: SIM below 8%$")
        self.assertTrue(any(line.rstrip().endswith("pass") for line in lines), lines)


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
