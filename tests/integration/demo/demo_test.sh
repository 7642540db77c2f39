#!/usr/bin/env bash
# scripts/demo end to end, short: the real daemon and tenants on the simulated
# GPU (no setup, no build: the test's build directory).
#   1. `scripts/demo --no-build --seconds 12`: a summary with a row per tenant
#      and span, each with a target, the simulator's figure (SIM), gpusliced's
#      reading and a mark (a miss with its reason); no limit exceeded by SIM
#      and the memory slice held; exit 0 exactly when every row passed, and
#      the closing lines list exactly the rows that missed (a missed lower
#      bound or reading is tolerated with a note: it needs CPU time an
#      overloaded machine may not give); the PNG exists and is a PNG; the
#      daemon it started is gone and its temporary directory removed.
#   2. The same interrupted by SIGINT once its table runs: exit 130, and every
#      process it started (its children) is gone.
#   3. --keep: the daemon answers at the URL it prints (over TCP) after the
#      demo exits, and the stop script it prints ends every process it left.
# Usage: demo_test.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: demo_test.sh BUILD_DIR}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
work=$(mktemp -d)
demo_pid=""
cleanup() {
  # Only the demo this test started, by its pid (it ends its own children).
  if [[ -n $demo_pid && $demo_pid -gt 1 ]] && kill -0 "$demo_pid" 2>/dev/null; then
    kill -TERM "$demo_pid" 2>/dev/null || true
    wait "$demo_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
log="$work/run1.log"  # the current part's output (each part its own file)
fail() { echo "FAIL: $*" >&2; echo "--- demo output:" >&2; cat "$log" >&2 || true; exit 1; }

# Children of a process, from /proc (pid ppid).
children_of() { ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' ' || true; }

# ---- 1. a short run ----
# Upper bounds (the notebook's limits by SIM, its memory slice) must hold. The
# lower bounds (a request met, the notebook near its cap) and gpusliced's
# reading agreeing with SIM need the tenants and the daemon to get the CPU in
# time: on an overloaded machine (this test runs beside others) they can be
# missed (exit 1, MISS rows). That is reported and tolerated here; scripts/test's
# demo stage runs the demo alone and fails on any miss.
status=0
"$repo/scripts/demo" --no-build --build "$build" --seconds 12 --out "$work/out" \
  >"$log" 2>&1 || status=$?
[[ $status == 0 || $status == 1 ]] || fail "scripts/demo exited $status (0 or 1 expected)"

summary=$(sed -n '/^Summary/,$p' "$log")
[[ -n $summary ]] || fail "no summary"
grep -q '^Summary, judged by SIM' <<<"$summary" || fail "the summary does not say it judges by SIM"
for row in "training +first half" "training +second half" "notebook +first half" \
           "notebook +second half" "notebook +peak" "inference +first half" \
           "inference +second half"; do
  grep -qE "^  $row " <<<"$summary" || fail "no summary row '$row'"
done
# Share rows: a target, SIM and gpusliced's reading (both numbers), a mark:
# pass, or MISS with its reasons.
share_row='^  (training|notebook|inference) +(first|second) half +'
share_row+='(>= [0-9]+% \(request\)|[0-9]+% \+/-[0-9.]+ \(limit\)) +[0-9.]+% +[0-9.]+% +'
share_row+='(pass|MISS: [A-Za-z].*)$'
shares=$(grep -cE "$share_row" <<<"$summary" || true)
[[ $shares == 6 ]] || fail "expected 6 share rows with target, SIM, DAEMON and a mark, got $shares"
grep -qE 'notebook +peak +<= 4.0 GiB \(slice\) +[0-9.]+ GiB +pass \(\+2 GiB refused\)$' \
  <<<"$summary" || fail "the memory slice row is not as expected"
# No limit exceeded by the ground truth: SIM <= limit + the row's tolerance.
over=$(awk '$6 == "(limit)" { limit = $4; sub(/%/, "", limit); tol = $5; sub(/\+\/-/, "", tol);
                              sim = $7; sub(/%/, "", sim); if (sim + 0 > limit + tol) print }' \
       <<<"$summary")
[[ -z $over ]] || fail "a limit was exceeded by SIM: $over"
misses=$(grep -cE '^  [a-z]+ .* MISS: ' <<<"$summary" || true)
if [[ $status == 0 ]]; then
  ((misses == 0)) || fail "exit 0 with MISS rows"
  grep -q 'Every promise was kept' "$log" || fail "no closing verdict"
else
  ((misses > 0)) || fail "exit 1 without a MISS row"
  grep -qE "^  MISSED $misses of 7 promises" "$log" ||
    fail "the closing verdict does not count the $misses MISS rows"
  listed=$(sed -n '/^  MISSED /,$p' "$log" | grep -cE '^    (training|notebook|inference) ' || true)
  ((listed == misses)) || fail "the closing verdict lists $listed misses, the table has $misses"
  echo "demo_test: note: a promise was missed (load average $(cut -d' ' -f1-3 /proc/loadavg)):"
  grep -E ' MISS: ' <<<"$summary"
fi
# The table ran every second and the live change and nvidia-smi were shown.
tables=$(grep -cE '^ +[0-9]+ s +GROUP' "$log" || true)
((tables >= 8)) || fail "expected a table a second (>= 8 in 12 s), got $tables"
grep -q '\$ gpuslice group set notebook --limit 25' "$log" || fail "no live change"
grep -qE '\| +[0-9]+MiB / +4096MiB \|' "$log" ||
  fail "nvidia-smi inside the slice does not show the 4 GiB slice"

png="$work/out/shares.png"
[[ -s $png ]] || fail "no $png"
[[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
  fail "$png is not a PNG"
[[ -s $work/out/summary.txt ]] || fail "no summary.txt"

daemon=$(sed -nE 's/^gpusliced is running \(pid ([0-9]+)\).*/\1/p' "$log")
[[ -n $daemon && $daemon -gt 1 ]] || fail "the demo did not say its daemon's pid"
if kill -0 "$daemon" 2>/dev/null && grep -q gpusliced "/proc/$daemon/cmdline" 2>/dev/null; then
  fail "gpusliced (pid $daemon) still runs after the demo"
fi
tmpdir=$(sed -nE 's/.*segments in ([^ ]+) \.\.\..*/\1/p' "$log")
[[ -n $tmpdir && ! -e $tmpdir ]] || fail "the demo's directory '$tmpdir' was not removed"

# ---- 2. interrupted ----
log="$work/run2.log"
"$repo/scripts/demo" --no-build --build "$build" --seconds 60 --out "$work/out2" >"$log" 2>&1 &
demo_pid=$!
deadline=$((SECONDS + 30))
until grep -q '^Every second' "$log" 2>/dev/null; do
  ((SECONDS < deadline)) || fail "the demo's table did not start within 30 s"
  kill -0 "$demo_pid" 2>/dev/null || fail "the demo exited early"
  sleep 0.1
done
mapfile -t kids < <(children_of "$demo_pid")
((${#kids[@]} >= 4)) || fail "expected the daemon and 3 tenants as children, got ${kids[*]}"
kill -INT "$demo_pid"
status=0
wait "$demo_pid" || status=$?
demo_pid=""
[[ $status == 130 ]] || fail "interrupted demo exited $status, not 130"
for k in "${kids[@]}"; do
  # A child gone, or its pid already reused by a process that is not the demo's.
  if [[ -r /proc/$k/cmdline ]] && grep -qE 'gpusliced|gpuslice-workload' "/proc/$k/cmdline" 2>/dev/null; then
    fail "process $k ($(tr '\0' ' ' <"/proc/$k/cmdline")) outlived the interrupted demo"
  fi
done
grep -q 'interrupted' "$log" || fail "the interrupted demo did not say so"

# ---- 3. --keep ----
log="$work/run3.log"
status=0
"$repo/scripts/demo" --no-build --build "$build" --seconds 8 --keep --out "$work/out3" \
  >"$log" 2>&1 || status=$?
[[ $status == 0 || $status == 1 ]] || fail "scripts/demo --keep exited $status"
url=$(sed -nE 's/^  Dashboard: +(http:[^ ]+).*/\1/p' "$log")
stop=$(sed -nE 's/^  To stop it: +//p' "$log")
[[ -n $url && -n $stop && -x $stop ]] || fail "--keep printed no URL or stop script"
mapfile -t kept < <(sed -nE 's/^Kept running.*\(pids ([0-9 ]+);.*/\1/p' "$log" | tr ' ' '\n')
((${#kept[@]} == 4)) || fail "--keep should leave the daemon and 3 tenants, said: ${kept[*]}"
curl -sf "${url}v1/groups" | grep -q '"notebook"' || { "$stop"; fail "no daemon answers at $url"; }
"$stop" >/dev/null
for k in "${kept[@]}"; do
  if [[ -r /proc/$k/cmdline ]] && grep -qE 'gpusliced|gpuslice-workload' "/proc/$k/cmdline" 2>/dev/null; then
    fail "process $k outlived the stop script"
  fi
done
echo "demo_test: passed (short run, SIGINT, --keep)"
