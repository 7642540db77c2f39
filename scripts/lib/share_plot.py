"""Shares over time as a PNG, drawn by gnuplot: the one plotting helper of the
demo (scripts/demo) and of the benchmarks whose shares move over time
(bench/scheduler, bench/share_accuracy).

    import share_plot            # with scripts/lib on sys.path
    if share_plot.available():
        err = share_plot.plot("out.png", "title", times,
                              [share_plot.Series("training", [51.0, 52.3, ...]), ...],
                              refs=[share_plot.Ref("limit", [(0.0, 15), (20.0, 30)], series=1)],
                              marks=[(20.0, "limit 15 -> 30")])

Contract:
- `times` are seconds (the x axis); each Series has one value per time, or
  None where it has none (a gap in its line).
- A Ref is a step function [(t, value), ...] drawn dashed in the colour of
  the series it belongs to (`series`: its index), from its first t to the last
  time; a value of None draws nothing for that step.
- `marks` are vertical dotted lines with a label at their top.
- plot() returns None once the PNG is written, else a one-line reason
  (gnuplot missing, or what it printed on failure); it never raises for
  gnuplot's sake. It writes its data next to the PNG and removes it.
- The PNG uses gnuplot's pngcairo terminal where gnuplot has it, else png.
"""

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

_terminal = None  # cached: "pngcairo", "png" or "" (none)


@dataclass
class Series:
    name: str
    values: list


@dataclass
class Ref:
    name: str
    steps: list  # [(t, value or None), ...], t ascending
    series: int = 0
    title: bool = field(default=True)  # False: no key entry


def available():
    """True when gnuplot is on PATH and can write PNGs."""
    return _png_terminal() != ""


def _png_terminal():
    global _terminal
    if _terminal is None:
        _terminal = ""
        if shutil.which("gnuplot") is not None:
            out = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True,
                                 text=True, check=False)
            names = {line.split()[0] for line in (out.stdout + out.stderr).splitlines()
                     if line.strip()}
            _terminal = "pngcairo" if "pngcairo" in names else "png" if "png" in names else ""
    return _terminal


def _quote(text):
    """A gnuplot single-quoted string ('' is a quote inside)."""
    return "'" + str(text).replace("'", "''") + "'"


def plot(png, title, times, series, *, refs=(), marks=(), ylabel="share of the GPU (%)",
         xlabel="seconds", ymax=100, size=(1000, 420)):
    terminal = _png_terminal()
    if not terminal:
        return "gnuplot with a png terminal is not installed (scripts/setup installs it)"
    if not times:
        return "no samples to plot"
    directory = os.path.dirname(os.path.abspath(png))
    os.makedirs(directory, exist_ok=True)
    fd, data = tempfile.mkstemp(prefix=".share_plot.", suffix=".dat", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            for k, t in enumerate(times):  # block 0: the series, one row per time
                row = [f"{t:.3f}"]
                for ser in series:
                    v = ser.values[k] if k < len(ser.values) else None
                    row.append("NaN" if v is None else f"{v:.3f}")
                f.write(" ".join(row) + "\n")
            for r in refs:  # one block per ref: its steps, ending at the last time
                pts = [(max(at, times[0]), v) for at, v in r.steps if at <= times[-1]]
                pts.append((times[-1], pts[-1][1] if pts else None))
                f.write("\n\n" + "".join(f"{at:.3f} {'NaN' if v is None else f'{v:.3f}'}\n"
                                          for at, v in pts))
        lines = [f"{_quote(data)} index 0 using 1:{2 + i} with lines lw 2 lc {i + 1} title "
                 f"{_quote(ser.name)}" for i, ser in enumerate(series)]
        lines += [f"{_quote(data)} index {1 + j} using 1:2 with steps dt 2 lw 1.5 "
                  f"lc {r.series + 1} " + (f"title {_quote(r.name)}" if r.title else "notitle")
                  for j, r in enumerate(refs)]
        top = ymax if ymax is not None else "*"
        arrows = "".join(
            f"set arrow from {t:.3f}, graph 0 to {t:.3f}, graph 1 nohead dt 3 lc rgb 'gray40'\n"
            f"set label {_quote(text)} at {t:.3f}, graph 0.97 offset 0.5,0 font ',9'\n"
            for t, text in marks)
        font = " font 'sans,10'" if terminal == "pngcairo" else ""
        script = (f"set terminal {terminal} size {size[0]},{size[1]}{font}\n"
                  f"set output {_quote(png)}\n"
                  f"set title {_quote(title)}\nset xlabel {_quote(xlabel)}\n"
                  f"set ylabel {_quote(ylabel)}\nset yrange [0:{top}]\n"
                  "set datafile missing 'NaN'\nset grid ytics lc rgb 'gray90'\n"
                  "set key outside right top\n"
                  f"{arrows}plot " + ", ".join(lines) + "\n")
        out = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True,
                             check=False)
        if out.returncode != 0 or not os.path.exists(png):
            msg = (out.stderr.strip().splitlines() or ["no output"])[-1]
            return f"gnuplot failed: {msg}"
        return None
    finally:
        os.remove(data)


def trailing_shares(times, busy, window_s, span_fn=None):
    """(times, [[share %]...]) of cumulative busy seconds `busy[i][k]` over a
    trailing window of `window_s`: share = 100 x busy delta / span, where the
    span is the window's length, or span_fn(k0, k1) when given (e.g. the
    window less the device's switching time). Starts once a full window lies
    behind a sample."""
    out_t, out = [], [[] for _ in busy]
    k0 = 0
    for k, t in enumerate(times):
        while k0 < k and t - times[k0 + 1] >= window_s - 1e-9:
            k0 += 1
        if t - times[k0] < window_s - 1e-9:
            continue
        span = span_fn(k0, k) if span_fn else t - times[k0]
        span = max(span, 1e-9)
        out_t.append(t)
        for i, b in enumerate(busy):
            out[i].append(100.0 * (b[k] - b[k0]) / span)
    return out_t, out
