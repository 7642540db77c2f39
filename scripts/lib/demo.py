"""The main job (scripts/demo runs it after setup and the build): gpuslice on
a simulated GPU, three tenants with different promises, watched through the
daemon the way a user would watch them.

What it does, in order:
  1. starts gpusliced on a private simulated H100 (its socket, state and
     segment directories in a fresh temporary directory);
  2. gives three groups their promises with `gpuslice group set`:
       training   a guaranteed share (--request 40), batch
       notebook   capped (--limit 10) with a memory slice (--memory 4GiB),
                  first in line for spare time (--weight 6)
       inference  the latency class (--priority latency --request 20)
     and starts one tenant in each with `gpuslice run --group G`
     (gpuslice-workload, the simulated workload the benchmarks run);
  3. prints a table every second: the simulator's ground truth (SIM: exact
     busy time per process, `gpuslice sim stats --json`) and, from the
     daemon's API (GET /v1/groups), limit, request, grant, gpusliced's
     reading of the share, memory used / limit;
  4. a quarter of the way in, shows `nvidia-smi` from inside the notebook's
     slice and a notebook process asking for more memory than its slice;
  5. halfway, raises the notebook's limit live (`gpuslice group set
     notebook --limit 25`);
  6. ends with a summary: each promise judged by SIM, gpusliced's reading
     beside it (a reading more than READING_TOLERANCE from SIM is a miss),
     what missed and why; a PNG of the shares over time, and with --keep the
     dashboard's URL.

Every process it starts is its own child, ended (by pid) on exit, on Ctrl-C
and on SIGTERM; with --keep the daemon and the tenants stay and a stop script
ends them. Exit status: 0 when every promise was kept (Demo.judge), 1 when
one was not, 2 for a bad command line, 3 when the demo could
not run (the message says why), 130 when interrupted.
"""

import argparse
import ctypes
import http.client
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import share_plot  # noqa: E402  (scripts/lib/share_plot.py)

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GIB = 1 << 30
# Points of share, judged on the simulator's exact figure (SIM): a request is
# met at request - SHARE_TOLERANCE, a cap that is always wanted is sat within
# SHARE_TOLERANCE; gpusliced's reading may be READING_TOLERANCE from SIM.
SHARE_TOLERANCE = 2.0
READING_TOLERANCE = 3.0
WARMUP_S = 3.0  # not judged after the start and after the live change
KEEP_S = 30 * 60  # with --keep, how long the tenants go on after the demo
# The promises (percent of the GPU) and the live change.
TRAINING_REQUEST = 40
NOTEBOOK_LIMIT, NOTEBOOK_LIMIT_LATER, NOTEBOOK_WEIGHT = 10, 25, 6
NOTEBOOK_MEMORY, NOTEBOOK_MEMORY_BYTES = "4GiB", 4 * (1 << 30)
INFERENCE_REQUEST = 20


class Fail(Exception):
    """The demo cannot go on; the message says why (exit 3)."""


class Interrupted(Exception):
    pass


def usage_error(msg):
    print(f"scripts/demo: {msg} (try --help)", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="scripts/demo", add_help=False,
        description="gpuslice on a simulated GPU: three tenants, their limits, requests and "
                    "memory slices, a live change, a summary and a plot.")
    ap.add_argument("--seconds", type=int, default=40,
                    help="how long the tenants run (default 40; at least 8)")
    ap.add_argument("--keep", action="store_true",
                    help="leave the daemon and the tenants running afterwards (for "
                         f"{KEEP_S // 60} minutes) and print the dashboard's URL")
    ap.add_argument("--out", help="where the plot and summary go (default <build>/demo)")
    ap.add_argument("--build", default=os.path.join(REPO, "build", "release"),
                    help="the build directory (default build/release)")
    ap.add_argument("--no-build", action="store_true",
                    help="skip scripts/setup and the build (scripts/demo; "
                         "also GPUSLICE_DEMO_NO_BUILD=1)")
    ap.add_argument("--check-args", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("-h", "--help", action="store_true")
    args, rest = ap.parse_known_args(argv)
    if args.help:
        ap.print_help()
        print("\nExit status: 0 every promise was kept by the simulator's exact figure "
              f"(requests at\nrequest - {SHARE_TOLERANCE:g}, the capped tenant within "
              f"{SHARE_TOLERANCE:g} of its cap, gpusliced's reading\nwithin "
              f"{READING_TOLERANCE:g} points of it), 1 one was not, 2 bad usage, 3 the demo "
              "could not run,\n130 interrupted.")
        sys.exit(0)
    if rest:
        usage_error(f"unknown argument '{rest[0]}'")
    if args.seconds < 8 or args.seconds > 3600:
        usage_error("--seconds must be between 8 and 3600")
    return args


# ---- the daemon's API on its Unix socket ----

class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=2.0):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def http_get(sock, path):
    """(status, body) of GET `path` on the daemon's socket; (0, "") when it does not answer."""
    try:
        c = UnixHTTPConnection(sock)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read().decode(errors="replace")
        c.close()
        return r.status, body
    except OSError:
        return 0, ""


def tail(path, n=800):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:].strip()
    except OSError:
        return ""


def fmt_bytes(n):
    if n is None:
        return "none"
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / (1 << 20):.0f} MiB"


def exit_text(code):
    """How a child ended: "exit 3", or "killed by SIGKILL"."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def fmt_pct(v, none="-"):
    return none if v is None else f"{v:.0f}%"


class Tenant:
    """One group and the workload its tenant runs."""

    def __init__(self, group, story, set_flags, workload, target):
        self.group, self.story = group, story
        self.set_flags, self.workload = set_flags, workload
        self.target = target  # see Demo.judge
        self.proc = None


class Row:
    """One line of the summary: a tenant's promise over a span, and why it
    missed (`misses`, empty when it was kept). Share rows carry SIM and DAEMON
    (percent, None: no figure); the memory row its peak as text (`value`)."""

    def __init__(self, group, span, target, sim=None, daemon=None, misses=(), value=None):
        self.group, self.span, self.target = group, span, target
        self.sim, self.daemon, self.value = sim, daemon, value
        self.misses = list(misses)

    @property
    def ok(self):
        return not self.misses

    def result(self):
        return "pass" if self.ok else "MISS: " + "; ".join(self.misses)


def share_misses(sim, daemon, low, high=None):
    """Why a share row missed: SIM below `low` or above `high` (None: no
    bound), or DAEMON more than READING_TOLERANCE from SIM; [] when kept."""
    misses = []
    if sim is None:
        misses.append("no figure from the simulator")
    else:
        if sim < low:
            misses.append(f"SIM below {low:g}%")
        if high is not None and sim > high:
            misses.append(f"SIM above {high:g}%")
    if daemon is None:
        misses.append("no reading from gpusliced")
    elif sim is not None and abs(daemon - sim) > READING_TOLERANCE:
        misses.append(f"DAEMON {abs(daemon - sim):.1f} points from SIM")
    return misses


def pdeathsig():
    """In a child before exec: SIGTERM when the demo (its parent) dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Demo:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build)
        self.bin = os.path.join(self.build, "bin")
        self.cli = os.path.join(self.bin, "gpuslice")
        self.daemon_bin = os.path.join(self.bin, "gpusliced")
        self.workload = os.path.join(self.bin, "gpuslice-workload")
        self.sim_tool = os.path.join(self.build, "sim", "bin", "gpuslice-sim")
        self.out = os.path.abspath(args.out or os.path.join(self.build, "demo"))
        self.seconds = args.seconds
        self.change_at = self.seconds / 2
        self.smi_at = max(2.0, self.seconds / 4)
        self.children = []  # every process this demo started (Popen), in start order
        self.daemon = None
        self.tmp = None
        self.keep = args.keep
        self.tty = sys.stdout.isatty()
        self.samples = []  # one dict per second, see sample()
        self.events = []  # (t, text): the live change and the slice checks
        self.alloc_refused = None  # the notebook's over-slice allocation: refused?
        self.tcp = None  # (host, port, token file) with --keep

    # ---- processes ----

    def spawn(self, cmd, log, **kw):
        """Starts `cmd` (stdout and stderr to `log`) as this demo's child, in a
        session of its own (Ctrl-C reaches only the demo, which ends it)."""
        with open(log, "w") as f:
            p = subprocess.Popen(cmd, env=self.env, stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True,
                                 preexec_fn=None if self.keep else pdeathsig, **kw)
        self.children.append(p)
        return p

    def stop_children(self):
        """Ends every child still running, by its own pid: the tenants, then the
        daemon (SIGTERM: it reverts what it changed and exits 0), SIGKILL after 5 s."""
        live = [p for p in self.children if p.poll() is None and p.pid > 1]
        tenants = [p for p in live if p is not self.daemon]
        for group in (tenants, [p for p in live if p is self.daemon]):
            for p in group:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
            for p in group:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def run_cli(self, *argv, check=True):
        out = subprocess.run([self.cli, *argv], env=self.env, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
        if check and out.returncode != 0:
            raise Fail(f"`gpuslice {' '.join(argv)}` failed (exit {out.returncode}): "
                       f"{(out.stderr or out.stdout).strip()}")
        return out

    # ---- setting up ----

    def check_build(self):
        for f in (self.cli, self.daemon_bin, self.workload, self.sim_tool,
                  os.path.join(self.build, "lib", "libgpuslice.so"),
                  os.path.join(self.build, "sim", "lib", "libcuda.so.1")):
            if not os.path.exists(f):
                raise Fail(f"{f} is missing: build first (scripts/demo builds it; "
                           f"or cmake --build --preset release)")

    def make_env(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuslice-demo.")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("GPUSLICE_") and k not in ("LD_PRELOAD", "CUDA_VISIBLE_DEVICES")}
        out = subprocess.run([self.cli, "sim", "env"], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise Fail(f"`gpuslice sim env` failed: {out.stderr.strip()}")
        for line in out.stdout.splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'")
        shm = os.path.join(self.tmp, "shm")
        os.makedirs(shm)
        env["GPUSLICE_SIM_STATE"] = os.path.join(self.tmp, "sim.state")
        env["GPUSLICE_SHM_DIR"] = shm
        env["GPUSLICE_SOCKET"] = os.path.join(self.tmp, "gpusliced.sock")
        self.env = env

    def start_daemon(self):
        cmd = [self.daemon_bin, "--socket", self.env["GPUSLICE_SOCKET"],
               "--state-dir", os.path.join(self.tmp, "state"),
               "--shm-dir", self.env["GPUSLICE_SHM_DIR"],
               "--poll-interval-ms", "100", "--log-level", "warn"]
        if os.geteuid() != 0:
            # Not root: the user's own group may change what this daemon holds.
            cmd += ["--admin-group", str(os.getegid())]
        if self.keep:
            with socket.socket() as s:  # a free port on the loopback
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            token = os.path.join(self.tmp, "token")
            with open(token, "w") as f:
                f.write(secrets.token_hex(16) + "\n")
            os.chmod(token, 0o600)
            cmd += ["--listen-tcp", f"127.0.0.1:{port}", "--token-file", token]
            self.tcp = ("127.0.0.1", port, token)
        log = os.path.join(self.tmp, "gpusliced.log")
        self.daemon = self.spawn(cmd, log)
        deadline = time.monotonic() + 20
        while http_get(self.env["GPUSLICE_SOCKET"], "/readyz")[0] != 200:
            if self.daemon.poll() is not None:
                raise Fail(f"gpusliced exited ({exit_text(self.daemon.returncode)}) at start:\n"
                           f"{tail(log)}")
            if time.monotonic() > deadline:
                raise Fail(f"gpusliced was not ready within 20 s:\n{tail(log)}")
            time.sleep(0.05)

    def tenants(self):
        run_s = self.seconds + 2 + (KEEP_S if self.keep else 0)
        wl = [self.workload, "--duration-s", str(run_s), "--quiet"]
        return [
            Tenant("training", f"a training job: guaranteed {TRAINING_REQUEST}% of the GPU "
                   "(its request), more when there is spare",
                   ["--request", str(TRAINING_REQUEST)],
                   wl + ["--kernel-us", "2000", "--alloc", str(16 * GIB)],
                   {"kind": "request", "request": TRAINING_REQUEST}),
            Tenant("notebook", f"a notebook: capped at {NOTEBOOK_LIMIT}% (its limit) in a "
                   f"{fmt_bytes(NOTEBOOK_MEMORY_BYTES).replace('.0', '')} memory slice; "
                   f"first in line for spare time (weight {NOTEBOOK_WEIGHT})",
                   ["--limit", str(NOTEBOOK_LIMIT), "--memory", NOTEBOOK_MEMORY,
                    "--weight", str(NOTEBOOK_WEIGHT)],
                   wl + ["--kernel-us", "500", "--alloc", str(3 * GIB)],
                   {"kind": "limit", "limits": [(0.0, NOTEBOOK_LIMIT),
                                                (self.change_at, NOTEBOOK_LIMIT_LATER)],
                    "memory": NOTEBOOK_MEMORY_BYTES}),
            Tenant("inference", "an inference service in the latency class: 1 ms requests, "
                   f"one at a time; request {INFERENCE_REQUEST}%",
                   ["--priority", "latency", "--request", str(INFERENCE_REQUEST)],
                   wl + ["--kernel-us", "1000", "--sync",
                         "--latency-file", os.path.join(self.tmp, "latency")],
                   {"kind": "request", "request": INFERENCE_REQUEST}),
        ]

    def start_tenants(self, tenants):
        for t in tenants:
            cmdline = ["group", "set", t.group, *t.set_flags]
            print(f"  $ gpuslice {' '.join(cmdline)}")
            self.run_cli(*cmdline)
        print()
        for t in tenants:
            cmd = [self.cli, "run", "--group", t.group, "--", *t.workload]
            print(f"  $ gpuslice run --group {t.group} -- gpuslice-workload "
                  f"{' '.join(shlex.quote(a) for a in t.workload[1:])}")
            t.proc = self.spawn(cmd, os.path.join(self.tmp, f"{t.group}.log"))
        # Each tenant is on the simulated GPU once the ground truth lists its pid.
        deadline = time.monotonic() + 20
        while True:
            s = self.sim_stats()
            pids = {p["pid"] for p in s["processes"]} if s else set()
            if all(t.proc.pid in pids for t in tenants):
                return
            for t in tenants:
                if t.proc.poll() is not None:
                    raise Fail(f"the {t.group} tenant exited "
                               f"({exit_text(t.proc.returncode)}) at start:\n"
                               f"{tail(os.path.join(self.tmp, t.group + '.log'))}")
            if time.monotonic() > deadline:
                raise Fail("the tenants did not reach the simulated GPU within 20 s")
            time.sleep(0.05)

    # ---- watching ----

    def sim_stats(self):
        out = subprocess.run([self.sim_tool, "stats", "--json"], env=self.env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            return None
        try:
            return json.loads(out.stdout)
        except ValueError:
            return None

    def sample(self, t, tenants):
        """One second's view: the daemon's groups (per group: limit, request,
        grant, share, memory used and limit, priority) and the simulator's busy
        time per tenant."""
        status, body = http_get(self.env["GPUSLICE_SOCKET"], "/v1/groups")
        groups = {}
        if status == 200:
            for g in json.loads(body).get("groups", []):
                gpu = (g.get("gpus") or [{}])[0]
                sched = gpu.get("schedule") or {}
                limit = (gpu.get("limit") or {})
                share = gpu.get("share")
                groups[g.get("id")] = {
                    "limit": sched.get("limit"), "request": sched.get("request"),
                    "priority": sched.get("priority"), "grant": gpu.get("grant_percent"),
                    "share": None if share is None else 100.0 * share,
                    "memory_used": gpu.get("memory_used_bytes"),
                    "memory_limit": limit.get("memory_bytes"),
                    "members": len(g.get("members") or [])}
        stats = self.sim_stats()
        busy = {}
        clock = None
        if stats:
            clock = stats["clock_ns"] / 1e9
            by_pid = {p["pid"]: p for p in stats["processes"]}
            for tn in tenants:
                p = by_pid.get(tn.proc.pid)
                busy[tn.group] = (sum(d["busy_ns"] for d in p["devices"]) / 1e9) if p else None
        s = {"t": t, "groups": groups, "busy": busy, "clock": clock,
             "daemon_answered": status == 200}
        # The ground truth's share over the last second.
        prev = self.samples[-1] if self.samples else None
        s["sim_share"] = {}
        for tn in tenants:
            b = busy.get(tn.group)
            if prev and b is not None and prev["busy"].get(tn.group) is not None and \
                    clock and prev["clock"] and clock > prev["clock"]:
                s["sim_share"][tn.group] = 100.0 * (b - prev["busy"][tn.group]) / \
                    (clock - prev["clock"])
        self.samples.append(s)
        return s

    def table(self, s, tenants):
        lines = [f"  {s['t']:4.0f} s  GROUP       CLASS     LIMIT  REQUEST  GRANT    "
                 f"SIM  DAEMON  MEMORY USED / LIMIT"]
        if not s["daemon_answered"]:
            lines.append("          (gpusliced did not answer)")
        for tn in tenants:
            g = s["groups"].get(tn.group, {})
            sim = s["sim_share"].get(tn.group)
            lines.append(
                f"          {tn.group:<10}  {g.get('priority') or '-':<8} "
                f"{fmt_pct(g.get('limit')):>6}  {fmt_pct(g.get('request')):>7}  "
                f"{fmt_pct(g.get('grant')):>5}  {fmt_pct(sim):>5}  {fmt_pct(g.get('share')):>6}  "
                f"{fmt_bytes(g.get('memory_used'))} / {fmt_bytes(g.get('memory_limit'))}")
        return lines

    def show_slice(self):
        """nvidia-smi inside the notebook's slice, and a notebook process asking
        for more memory than the slice has left."""
        print("\n  What the notebook sees: nvidia-smi inside its slice "
              "(`gpuslice run --group notebook -- nvidia-smi`):\n")
        out = subprocess.run([self.cli, "run", "--group", "notebook", "--", "nvidia-smi"],
                             env=self.env, capture_output=True, text=True, timeout=30)
        for line in (out.stdout or out.stderr).splitlines():
            print(("    " + line).rstrip())
        outside = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader"],
            env=self.env, capture_output=True, text=True, timeout=30)
        if outside.returncode == 0:
            print(f"\n  (outside any slice the same GPU shows {outside.stdout.strip()} "
                  "of memory)")
        print("\n  A second notebook process asks for 2 GiB more than the slice has left:")
        cmd = ["run", "--group", "notebook", "--", self.workload, "--alloc", str(2 * GIB),
               "--kernels", "1", "--quiet"]
        print(f"  $ gpuslice {' '.join(cmd[:4])} gpuslice-workload --alloc {2 * GIB} "
              "--kernels 1")
        res = subprocess.run([self.cli, *cmd], env=self.env, capture_output=True, text=True,
                             timeout=30)
        msg = (res.stderr or res.stdout).strip().splitlines()
        print(f"    exit {res.returncode}: {msg[-1] if msg else '(no output)'}")
        self.alloc_refused = res.returncode != 0 and "OUT_OF_MEMORY" in res.stderr
        print()

    def watch(self, tenants):
        start = time.monotonic()
        self.t0 = start
        n = 0
        shown_slice = changed = False
        drawn = 0  # lines of the last table still on a terminal
        while n <= self.seconds:
            target = start + n
            now = time.monotonic()
            if target > now:
                time.sleep(target - now)
            t = time.monotonic() - start
            s = self.sample(t, tenants)
            lines = self.table(s, tenants)
            if self.tty and drawn:
                sys.stdout.write(f"\x1b[{drawn}F\x1b[J")
            print("\n".join(lines))
            sys.stdout.flush()
            drawn = len(lines) if self.tty else 0
            if self.daemon.poll() is not None:
                raise Fail(f"gpusliced exited ({exit_text(self.daemon.returncode)}) "
                           "during the demo:\n"
                           f"{tail(os.path.join(self.tmp, 'gpusliced.log'))}")
            for tn in tenants:
                if tn.proc.poll() is not None and n < self.seconds:
                    raise Fail(f"the {tn.group} tenant exited early "
                               f"({exit_text(tn.proc.returncode)}):\n"
                               f"{tail(os.path.join(self.tmp, tn.group + '.log'))}")
            if not shown_slice and t >= self.smi_at:
                shown_slice, drawn = True, 0
                self.show_slice()
                self.events.append((time.monotonic() - start, "nvidia-smi in the slice"))
            if not changed and t >= self.change_at:
                changed, drawn = True, 0
                print("\n  Halfway: the notebook gets more, live, without a restart:")
                print(f"  $ gpuslice group set notebook --limit {NOTEBOOK_LIMIT_LATER}")
                self.run_cli("group", "set", "notebook", "--limit", str(NOTEBOOK_LIMIT_LATER))
                self.change_at = time.monotonic() - start
                for tn in tenants:
                    if tn.group == "notebook":
                        tn.target["limits"][1] = (self.change_at, NOTEBOOK_LIMIT_LATER)
                self.events.append((self.change_at, f"notebook limit {NOTEBOOK_LIMIT}% -> "
                                                    f"{NOTEBOOK_LIMIT_LATER}%"))
                print()
            # The next whole second; one missed (nvidia-smi ran) is skipped, not caught up.
            n = max(n + 1, int(time.monotonic() - start) + 1)

    # ---- judging ----

    def phase_means(self, group, t0, t1):
        """(SIM, DAEMON) over (t0, t1], percent: the simulator's exact busy time
        over its clock between the span's first and last sample, and the mean
        of gpusliced's readings of the same span (a reading is of the time
        before its sample, so the one at t0 is left out, as SIM leaves out
        what was before t0); None where there is no figure."""
        daemon = [s["groups"][group]["share"] for s in self.samples
                  if t0 < s["t"] <= t1 and s["groups"].get(group, {}).get("share") is not None]
        inside = [s for s in self.samples if t0 <= s["t"] <= t1 and s["busy"].get(group)
                  is not None and s["clock"]]
        sim = None
        if len(inside) >= 2 and inside[-1]["clock"] > inside[0]["clock"]:
            sim = 100 * (inside[-1]["busy"][group] - inside[0]["busy"][group]) / \
                (inside[-1]["clock"] - inside[0]["clock"])
        return sim, (sum(daemon) / len(daemon) if daemon else None)

    def judge(self, tenants):
        """The summary's rows (Row), each judged by the simulator's figure
        (SIM): a request is met at SIM >= request - SHARE_TOLERANCE; a limit of
        a tenant that always wants more (the notebook) holds when SIM is within
        SHARE_TOLERANCE of it, so a limit exceeded and a change that did not
        apply are misses alike; gpusliced's reading (DAEMON) more than
        READING_TOLERANCE from SIM is a miss too. The memory slice holds when
        the memory used stays within it and an allocation past it was refused."""
        end = self.samples[-1]["t"]
        phases = [("first half", WARMUP_S, self.change_at),
                  ("second half", self.change_at + WARMUP_S, end)]
        rows = []
        for tn in tenants:
            tg = tn.target
            for name, t0, t1 in phases:
                sim, daemon = self.phase_means(tn.group, t0, t1)
                if tg["kind"] == "request":
                    want = tg["request"]
                    rows.append(Row(tn.group, name, f">= {want}% (request)", sim, daemon,
                                    share_misses(sim, daemon, low=want - SHARE_TOLERANCE)))
                else:
                    want = [v for at, v in tg["limits"] if at <= t0 + 1e-9][-1]
                    rows.append(Row(tn.group, name, f"{want}% +/-{SHARE_TOLERANCE:g} (limit)",
                                    sim, daemon,
                                    share_misses(sim, daemon, low=want - SHARE_TOLERANCE,
                                                 high=want + SHARE_TOLERANCE)))
            if tg.get("memory"):
                used = [s["groups"][tn.group]["memory_used"] for s in self.samples
                        if s["groups"].get(tn.group, {}).get("memory_used") is not None]
                peak = max(used) if used else None
                misses = []
                if peak is None:
                    misses.append("no memory reading from gpusliced")
                elif peak > tg["memory"]:
                    misses.append(f"used {fmt_bytes(peak)}, above the slice")
                if not self.alloc_refused:
                    misses.append("an allocation past the slice was not refused")
                rows.append(Row(tn.group, "peak", f"<= {fmt_bytes(tg['memory'])} (slice)",
                                misses=misses, value=fmt_bytes(peak)))
        return rows

    def summary(self, tenants, rows):
        """Prints the summary; returns its table's lines."""
        print(f"""
Summary, judged by SIM: the simulator's exact busy time over the span (gpuslice sim
stats --json). DAEMON: the mean of gpusliced's per-second readings (GET /v1/groups)
over the same span. Each span leaves out its first {WARMUP_S:g} s (the start, the live
change). A request is met at SIM >= request - {SHARE_TOLERANCE:g}; the notebook always wants
more, so its limit holds when SIM is within {SHARE_TOLERANCE:g} points of it; DAEMON more than
{READING_TOLERANCE:g} points from SIM is a miss (what gpusliced reports must be the truth).
""")
        header = (f"  {'TENANT':<10} {'SPAN':<12} {'TARGET':<20} {'SIM':>8} {'DAEMON':>8}  "
                  "RESULT")
        print(header)
        lines = [header]
        for r in rows:
            if r.value is not None:
                refused = "+2 GiB refused" if self.alloc_refused else "+2 GiB NOT refused"
                line = (f"  {r.group:<10} {r.span:<12} {r.target:<20} {r.value:>8} {'':>8}  "
                        f"{r.result()}" + (f" ({refused})" if r.ok else ""))
            else:
                line = (f"  {r.group:<10} {r.span:<12} {r.target:<20} {fmt_pct1(r.sim):>8} "
                        f"{fmt_pct1(r.daemon):>8}  {r.result()}")
            lines.append(line)
            print(line)
        lat = self.latency()
        if lat:
            print(f"\n  inference, launch to completion (not judged): p50 {lat[0]:.2f} ms, "
                  f"p99 {lat[1]:.2f} ms over {lat[2]} requests of 1 ms")
        for span in sorted({r.span for r in rows if not r.ok and r.sim is not None}):
            busy = sum(r.sim for r in rows if r.span == span and r.sim is not None)
            if busy < 93:
                load, cpus = os.getloadavg()[0], os.cpu_count() or 1
                why = ("the machine is busy: the tenants may not get the CPU to launch in time"
                       if load >= 0.75 * cpus else "the machine was not busy")
                print(f"  note ({span}): the GPU was busy {busy:.0f}% of the time while every "
                      f"tenant wanted more\n    (load average {load:.1f} on {cpus} CPUs: "
                      f"{why}).")
        return lines

    def latency(self):
        try:
            with open(os.path.join(self.tmp, "latency")) as f:
                vals = sorted(float(line.split()[1]) / 1000 for line in f
                              if len(line.split()) == 2)
        except (OSError, ValueError):
            return None
        if not vals:
            return None
        pick = lambda q: vals[min(len(vals) - 1, int(q * len(vals)))]  # noqa: E731
        return pick(0.5), pick(0.99), len(vals)

    def plot(self, tenants):
        times = [s["t"] for s in self.samples]
        series = [share_plot.Series(f"{tn.group} (SIM)",
                                    [s["sim_share"].get(tn.group) for s in self.samples])
                  for tn in tenants]
        refs = []
        for i, tn in enumerate(tenants):
            tg = tn.target
            if tg["kind"] == "request":
                refs.append(share_plot.Ref(f"{tn.group} request", [(0.0, tg["request"])],
                                           series=i))
            else:
                refs.append(share_plot.Ref(f"{tn.group} limit", list(tg["limits"]), series=i))
        png = os.path.join(self.out, "shares.png")
        if os.path.exists(png):  # never show an earlier run's plot as this one's
            os.remove(png)
        err = share_plot.plot(png, "gpuslice demo: shares of one simulated H100 "
                              "(solid: the simulator's exact share; dashed: promises)",
                              times, series, refs=refs,
                              marks=[(self.change_at, f"notebook {NOTEBOOK_LIMIT}% -> "
                                                      f"{NOTEBOOK_LIMIT_LATER}%")],
                              ylabel="share of the GPU (%)")
        return png, err

    # ---- the whole run ----

    def run(self):
        self.check_build()
        try:
            os.makedirs(self.out, exist_ok=True)
        except OSError as e:
            raise Fail(f"cannot write to {self.out}: {e.strerror} (--out)") from e
        self.make_env()
        tenants = self.tenants()
        print("gpuslice demo: one simulated NVIDIA H100, shared by three tenants through "
              "gpusliced.\n")
        for tn in tenants:
            print(f"  {tn.group:<10} {tn.story}")
        print(f"\nStarting gpusliced (socket, state and segments in {self.tmp}) ...")
        self.start_daemon()
        print(f"gpusliced is running (pid {self.daemon.pid}). Setting the promises and "
              "starting the tenants:\n")
        self.start_tenants(tenants)
        print(f"\nEvery second for {self.seconds} s: SIM is the simulator's ground truth "
              "(exact busy time), the rest\nis gpusliced's (GET /v1/groups), DAEMON its reading "
              "of the share:\n")
        self.watch(tenants)
        if not self.keep:
            # They stop by themselves 2 s after the table and write the latency file then.
            deadline = time.monotonic() + 10
            for tn in tenants:
                try:
                    tn.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        rows = self.judge(tenants)
        lines = self.summary(tenants, rows)
        png, err = self.plot(tenants)
        if err:
            print(f"\n  No plot: {err}")
        else:
            print(f"\n  Plot of the shares over time: {png}")
        with open(os.path.join(self.out, "summary.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(self.out, "samples.json"), "w") as f:
            json.dump({"events": self.events, "samples": self.samples}, f)
        missed = [r for r in rows if not r.ok]
        if not missed:
            print("\n  Every promise was kept (judged by the simulator's exact figure).")
        else:
            print(f"\n  MISSED {len(missed)} of {len(rows)} promises (judged by the simulator's "
                  "exact figure):")
            for r in missed:
                print(f"    {r.group} {r.span} ({r.target}): {'; '.join(r.misses)}")
        passed = not missed
        if self.keep:
            self.kept(tenants)
        return 0 if passed else 1

    def save_logs(self):
        """Copies the daemon's and the tenants' logs to <out>/logs (the
        temporary directory goes away)."""
        if not self.tmp:
            return
        dest = os.path.join(self.out, "logs")
        try:
            os.makedirs(dest, exist_ok=True)
            for name in os.listdir(self.tmp):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(self.tmp, name), dest)
            print(f"scripts/demo: the logs are in {dest}", file=sys.stderr)
        except OSError as e:
            print(f"scripts/demo: could not keep the logs: {e}", file=sys.stderr)

    def kept(self, tenants):
        host, port, token = self.tcp
        url = f"http://{host}:{port}/"
        try:
            c = http.client.HTTPConnection(host, port, timeout=2)
            c.request("GET", "/")
            r = c.getresponse()
            page = r.status == 200 and "html" in (r.getheader("Content-Type") or "")
            r.read()
            c.close()
        except OSError:
            page = False
        pids = [p.pid for p in self.children if p.poll() is None and p.pid > 1]
        stop = os.path.join(self.tmp, "stop")
        ordered = [p for p in self.children if p is not self.daemon] + [self.daemon]
        with open(stop, "w") as f:
            f.write("#!/bin/sh\n# Stops what scripts/demo --keep left running and removes its "
                    "directory. A pid is\n# signalled only while it is still the same process "
                    "(its start time).\nstarted() { sed 's/.*) //' /proc/$1/stat 2>/dev/null "
                    "| cut -d' ' -f20; }\n")
            for p in ordered:
                st = start_time(p.pid)
                if p.poll() is None and p.pid > 1 and st:
                    f.write(f'[ "$(started {p.pid})" = "{st}" ] && kill {p.pid}\n')
            st = start_time(self.daemon.pid)
            f.write(f'while [ "$(started {self.daemon.pid})" = "{st}" ]; do sleep 0.1; done\n')
            f.write(f"rm -rf {shlex.quote(self.tmp)}\necho 'gpuslice demo stopped'\n")
        os.chmod(stop, 0o755)
        print("\nKept running (--keep): gpusliced and the tenants "
              f"(pids {' '.join(map(str, pids))}; the tenants stop by themselves in "
              f"{KEEP_S // 60} minutes).")
        if page:
            with open(token) as f:
                secret = f.read().strip()
            print(f"  Dashboard:  {url}")
            print(f"  With changes allowed (the token in the fragment, docs/dashboard.md): "
                  f"{url}#token={secret}")
        else:
            print(f"  Dashboard:  {url} (this build serves no dashboard page; the API is "
                  f"there: {url}v1/groups, {url}metrics; token in {token})")
        print(f"  Watch it:    GPUSLICE_SOCKET={self.env['GPUSLICE_SOCKET']} "
              f"GPUSLICE_SHM_DIR={self.env['GPUSLICE_SHM_DIR']} {self.cli} top")
        print(f"  To stop it:  {stop}")


def start_time(pid):
    """The start time of process `pid` (field 22 of /proc/<pid>/stat), or "" when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def fmt_pct1(v):
    return "-" if v is None else f"{v:.1f}%"


def main(argv):
    args = parse_args(argv)
    if args.check_args:
        return 0
    demo = Demo(args)

    def on_signal(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    status = 3
    try:
        status = demo.run()
    except Fail as e:
        print(f"\nscripts/demo: {e}", file=sys.stderr)
        status = 3
        demo.save_logs()
    except (Interrupted, KeyboardInterrupt) as e:
        print(f"\nscripts/demo: interrupted ({e}); stopping what it started", file=sys.stderr)
        status = 130
        demo.keep = False
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if not demo.keep or status in (3, 130):
            demo.stop_children()
            if demo.tmp:
                subprocess.run(["rm", "-rf", demo.tmp], check=False)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
