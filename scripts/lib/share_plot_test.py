#!/usr/bin/env python3
"""Tests share_plot.py: the trailing-window shares, and the PNG gnuplot draws
(skipped where gnuplot is not installed)."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import share_plot  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class TrailingSharesTest(unittest.TestCase):
    def test_share_is_busy_time_over_the_window(self):
        times = [0.1 * k for k in range(21)]
        # Tenant 0 busy 30% of the time throughout, tenant 1 60% from 1 s on.
        busy0 = [0.03 * k for k in range(21)]
        busy1 = [0.0 if k <= 10 else 0.06 * (k - 10) for k in range(21)]
        ts, shares = share_plot.trailing_shares(times, [busy0, busy1], 0.5)
        self.assertAlmostEqual(ts[0], 0.5)  # the first time with a full window behind it
        self.assertEqual(len(ts), 16)
        for v in shares[0]:
            self.assertAlmostEqual(v, 30.0, places=6)
        self.assertAlmostEqual(shares[1][ts.index(ts[-1])], 60.0, places=6)
        self.assertAlmostEqual(shares[1][0], 0.0, places=6)

    def test_span_function_replaces_the_window_length(self):
        times = [0.0, 1.0, 2.0]
        busy = [[0.0, 0.5, 1.0]]
        ts, shares = share_plot.trailing_shares(times, busy, 1.0, span_fn=lambda a, b: 0.5)
        self.assertEqual(ts, [1.0, 2.0])
        self.assertAlmostEqual(shares[0][0], 100.0)


class PlotTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        for name in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    @unittest.skipUnless(share_plot.available(), "gnuplot with a png terminal is not installed")
    def test_writes_a_png_and_removes_its_data(self):
        png = os.path.join(self.dir, "it's a plot.png")  # a quote in a name is quoted
        times = [0.5 * k for k in range(20)]
        err = share_plot.plot(
            png, "tenant's shares", times,
            [share_plot.Series("a", [10.0 + k % 3 for k in range(20)]),
             share_plot.Series("b", [None if k < 4 else 50.0 for k in range(20)])],
            refs=[share_plot.Ref("limit a", [(0.0, 10), (4.2, 25)], series=0),
                  share_plot.Ref("none", [(0.0, None)], series=1, title=False)],
            marks=[(4.2, "limit 10% -> 25%")])
        self.assertIsNone(err)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC)
        self.assertEqual(os.listdir(self.dir), [os.path.basename(png)])

    def test_no_samples_is_a_reason_not_an_exception(self):
        if not share_plot.available():
            self.skipTest("gnuplot is not installed")
        err = share_plot.plot(os.path.join(self.dir, "x.png"), "t", [], [])
        self.assertEqual(err, "no samples to plot")
        self.assertEqual(os.listdir(self.dir), [])

    def test_without_gnuplot_it_says_so(self):
        saved_path, saved = os.environ.get("PATH", ""), share_plot._terminal
        try:
            os.environ["PATH"] = self.dir  # no gnuplot there
            share_plot._terminal = None
            self.assertFalse(share_plot.available())
            err = share_plot.plot(os.path.join(self.dir, "x.png"), "t", [0.0], [])
            self.assertIn("gnuplot", err)
        finally:
            os.environ["PATH"] = saved_path
            share_plot._terminal = saved
        self.assertEqual(os.listdir(self.dir), [])


if __name__ == "__main__":
    unittest.main()
