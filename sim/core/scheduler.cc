#include "sim/core/scheduler.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "sim/core/mig_state.h"

namespace gpuslice::sim {
namespace {

bool HasWork(const ContextRecord& c, int device, int lane) {
  return c.status == kContextActive && c.device == device && c.lane == lane && c.count > 0;
}

bool IsMpsClient(const ContextRecord& c) {
  return (c.flags & kContextMpsClient) != 0 && c.mps_server_pid > 0;
}

// True when contexts a and b belong to one scheduling group (invariant 4):
// the same context, or MPS clients of the same server.
bool SameGroup(const SimState& s, int a, int b) {
  if (a == b) return true;
  const ContextRecord& x = s.contexts[a];
  const ContextRecord& y = s.contexts[b];
  return IsMpsClient(x) && IsMpsClient(y) && x.mps_server_pid == y.mps_server_pid;
}

// The process slot whose NVML samples carry the context's work: the server's
// for an MPS client, else its own.
int32_t ReportSlot(const ContextRecord& c) {
  return IsMpsClient(c) && c.report_slot >= 0 ? c.report_slot : c.process_slot;
}

// The next context of `lane` with work, round-robin from the lane's cursor,
// skipping the group of `exclude` (-1: skip nothing); -1 if none.
int PickNext(const SimState& s, int device, int lane, int exclude) {
  const SchedLane& l = s.devices[device].lanes[lane];
  for (int k = 0; k < kMaxContexts; ++k) {
    int i = static_cast<int>((l.rr_next + k) % kMaxContexts);
    if (!HasWork(s.contexts[i], device, lane)) continue;
    if (exclude >= 0 && SameGroup(s, i, exclude)) continue;
    return i;
  }
  return -1;
}

uint32_t Percent(int64_t part, int64_t whole) {
  if (whole <= 0) return 0;
  return static_cast<uint32_t>(std::min<int64_t>(100, (part * 100 + whole / 2) / whole));
}

// Adds device busy time [t0, t1) to the device's open window(s), credited in
// the per-process samples to `report_slot`, closing windows as their end passes.
void AccountDevice(SimState& s, int device, int32_t report_slot, int64_t t0, int64_t t1) {
  DeviceState& d = s.devices[device];
  const int64_t total = t1 - t0;
  while (t0 < t1) {
    CloseWindows(s, device, t0);
    int64_t seg_end = std::min(t1, d.window_start_ns + s.params.sample_ns);
    int64_t dt = seg_end - t0;
    d.window_busy_ns += dt;
    uint32_t n = d.window_process_count;
    uint32_t i = 0;
    while (i < n && d.window_processes[i].process_slot != report_slot) ++i;
    if (i == n && n < kWindowProcesses) {
      d.window_processes[n] = {report_slot, 0, 0};
      d.window_process_count = ++n;
    }
    if (i < n) d.window_processes[i].busy_ns += dt;
    t0 = seg_end;
  }
  d.busy_ns += total;
}

// Ground truth: context `ctx`'s kernel executed for `dt`.
void AccountContext(SimState& s, int ctx, int64_t dt) {
  ContextRecord& c = s.contexts[ctx];
  c.busy_ns += dt;
  if (c.process_slot >= 0) s.processes[c.process_slot].devices[c.device].busy_ns += dt;
}

// Marks ops at the head that are complete: the head kernel if done, then any
// markers behind it (invariant 2).
void CompleteReadyOps(SimState& s, int ctx, int64_t t) {
  ContextRecord& c = s.contexts[ctx];
  while (c.count > 0) {
    QueuedOp& op = c.queue[c.head];
    if (op.remaining_ns > 0) break;
    if (op.event_slot >= 0) {
      c.event_time_ns[op.event_slot] = t;
      c.event_done_seq[op.event_slot] = op.seq;
    } else {
      ++c.kernels;
      ++s.devices[c.device].kernels;
      if (c.process_slot >= 0) ++s.processes[c.process_slot].devices[c.device].kernels;
    }
    c.completed_seq = op.seq;
    c.head = (c.head + 1) % kQueueCapacity;
    --c.count;
  }
}

// The running context stops executing (ran dry, preempted or destroyed).
void Release(SchedLane& l) {
  l.last_ctx = l.running_ctx;
  l.rr_next = static_cast<uint32_t>((l.running_ctx + 1) % kMaxContexts);
  l.running_ctx = -1;
}

// Executes the MPS group of the device's running context from `t` for one
// step: until the first of its head kernels completes, the slice ends, or
// `now_ns`. Model: every member with work runs concurrently; while the
// members' thread percentages sum to at most 100 each progresses at full
// speed, beyond that all progress at 100/sum (the SMs are oversubscribed).
// Returns the time reached; releases the lane when the group ran dry.
int64_t StepGroup(SimState& s, int device, int lane, int64_t t, int64_t now_ns) {
  SchedLane& l = s.devices[device].lanes[lane];
  int members[kMaxContexts];
  int n = 0;
  int64_t percent_sum = 0;
  for (int i = 0; i < kMaxContexts; ++i) {
    if (HasWork(s.contexts[i], device, lane) && SameGroup(s, i, l.running_ctx)) {
      members[n++] = i;
      percent_sum += std::max<uint32_t>(1, s.contexts[i].thread_percent);
    }
  }
  assert(n > 0);
  const int64_t den = std::max<int64_t>(100, percent_sum);
  auto wall_needed = [&](int i) {  // wall time until member i's head kernel completes
    const int64_t remaining = s.contexts[i].queue[s.contexts[i].head].remaining_ns;
    return (remaining * den + 99) / 100;
  };
  int64_t run = std::min(l.slice_end_ns - t, now_ns - t);
  for (int k = 0; k < n; ++k) run = std::min(run, wall_needed(members[k]));
  AccountDevice(s, device, ReportSlot(s.contexts[l.running_ctx]), t, t + run);
  for (int k = 0; k < n; ++k) {
    ContextRecord& c = s.contexts[members[k]];
    QueuedOp& op = c.queue[c.head];
    const int64_t progress = wall_needed(members[k]) == run
                                 ? op.remaining_ns
                                 : std::min(op.remaining_ns, run * 100 / den);
    op.remaining_ns -= progress;
    AccountContext(s, members[k], run);
    if (op.remaining_ns == 0) CompleteReadyOps(s, members[k], t + run);
  }
  t += run;
  if (s.contexts[l.running_ctx].count == 0) {  // keep a member with work in front
    int next = -1;
    for (int k = 0; k < n && next < 0; ++k) {
      if (s.contexts[members[k]].count > 0) next = members[k];
    }
    if (next < 0) {
      Release(l);
    } else {
      l.running_ctx = next;
    }
  }
  return t;
}

}  // namespace

void CloseWindows(SimState& s, int device, int64_t now_ns) {
  DeviceState& d = s.devices[device];
  const int64_t sample = s.params.sample_ns;
  while (now_ns >= d.window_start_ns + sample) {
    UtilWindow& w = d.windows[d.windows_closed % kUtilWindows];
    w.start_ns = d.window_start_ns;
    w.end_ns = d.window_start_ns + sample;
    w.gpu_percent = Percent(d.window_busy_ns, sample);
    w.process_count = 0;
    for (uint32_t i = 0; i < d.window_process_count; ++i) {
      const auto& p = d.window_processes[i];
      if (p.busy_ns <= 0 || p.process_slot < 0) continue;
      w.processes[w.process_count++] = {s.processes[p.process_slot].pid,
                                        Percent(p.busy_ns, sample)};
    }
    ++d.windows_closed;
    d.window_start_ns += sample;
    d.window_busy_ns = 0;
    d.window_process_count = 0;
    // After a long idle stretch, skip ahead: only the newest kUtilWindows matter.
    int64_t behind = (now_ns - d.window_start_ns) / sample;
    if (behind > kUtilWindows) {
      int64_t skip = behind - kUtilWindows;
      d.window_start_ns += skip * sample;
      d.windows_closed += static_cast<uint64_t>(skip);
    }
  }
}

namespace {

// Runs lane `lane` of `device` from `t` to `now_ns`: executes, completes and
// accounts its work.
void AdvanceLane(SimState& s, int device, int lane, int64_t t, int64_t now_ns) {
  SchedLane& l = s.devices[device].lanes[lane];
  DeviceState& d = s.devices[device];
  const SimParams& p = s.params;
  while (t < now_ns) {
    if (l.running_ctx < 0) {
      // Round-robin over groups: another group first, the last one only if alone.
      int next = l.last_ctx >= 0 ? PickNext(s, device, lane, l.last_ctx) : -1;
      if (next < 0) next = PickNext(s, device, lane, -1);
      if (next < 0) break;  // idle until now
      l.running_ctx = next;
      l.switch_end_ns = t;
      if (l.last_ctx >= 0 && !SameGroup(s, l.last_ctx, next) && p.switch_ns > 0) {
        l.switch_end_ns = t + p.switch_ns;
        ++d.switches;
      }
      l.slice_end_ns = l.switch_end_ns + p.timeslice_ns;
    }
    if (t < l.switch_end_ns) {  // switching: nothing executes
      t = std::min(now_ns, l.switch_end_ns);
      continue;
    }
    if (IsMpsClient(s.contexts[l.running_ctx])) {
      t = StepGroup(s, device, lane, t, now_ns);
      if (l.running_ctx < 0) continue;  // the group ran dry: yield early
    } else {
      ContextRecord& c = s.contexts[l.running_ctx];
      assert(c.count > 0 && c.queue[c.head].remaining_ns > 0);
      QueuedOp& op = c.queue[c.head];
      int64_t run = std::min({op.remaining_ns, l.slice_end_ns - t, now_ns - t});
      AccountDevice(s, device, ReportSlot(c), t, t + run);
      AccountContext(s, l.running_ctx, run);
      t += run;
      op.remaining_ns -= run;
      if (op.remaining_ns == 0) {
        CompleteReadyOps(s, l.running_ctx, t);
        if (c.count == 0) {  // ran dry: yield early
          Release(l);
          continue;
        }
      }
    }
    if (t >= l.slice_end_ns) {
      if (PickNext(s, device, lane, l.running_ctx) >= 0) {
        Release(l);  // preempted; its kernel resumes in a later slice
      } else {
        l.slice_end_ns = t + p.timeslice_ns;  // nobody waiting: keep going
      }
    }
  }
}

// Closes the windows up to `now_ns` and integrates the energy of
// [start, now_ns): idle power while idle or switching, busy power while
// executing (lanes side by side count once), both capped by the power limit.
void FinishAdvance(SimState& s, int device, int64_t start, int64_t busy_before, int64_t now_ns) {
  DeviceState& d = s.devices[device];
  CloseWindows(s, device, now_ns);
  const double limit_mw = d.power_limit_mw;
  const double idle_mw = std::min<double>(d.info.power_idle_mw, limit_mw);
  const double busy_mw = std::min<double>(d.info.power_busy_mw, limit_mw);
  const int64_t busy = std::min(d.busy_ns - busy_before, now_ns - start);
  d.energy_mj +=
      (idle_mw * static_cast<double>(now_ns - start - busy) + busy_mw * static_cast<double>(busy)) *
      1e-9;
  d.sched_ns = now_ns;
}

}  // namespace

void AdvanceDevice(SimState& s, int device, int64_t now_ns) {
  DeviceState& d = s.devices[device];
  if (now_ns <= d.sched_ns) return;
  const int64_t start = d.sched_ns;
  const int64_t busy_before = d.busy_ns;

  // Out of MIG mode every context is on lane 0 (a GPU changes mode only
  // idle, and takes lane-0 contexts only out of MIG mode): the whole span at
  // once, no lane to look for.
  if (d.mig_mode != kMigEnabled) {
    AdvanceLane(s, device, 0, start, now_ns);
    FinishAdvance(s, device, start, busy_before, now_ns);
    return;
  }
  // MIG devices with something to run: one alone runs the whole span at
  // once; several run side by side, one NVML window at a time, so that each
  // window is credited what ran in it.
  bool active[kSchedLanes] = {};
  int active_count = 0;
  int only = 0;
  auto mark = [&](int lane) {
    if (lane < 0 || lane >= kSchedLanes || active[lane]) return;
    active[lane] = true;
    ++active_count;
    only = lane;
  };
  for (const ContextRecord& c : s.contexts) {
    if (c.status == kContextActive && c.device == device && c.count > 0) mark(c.lane);
  }
  for (int lane = 0; lane < kSchedLanes; ++lane) {
    if (d.lanes[lane].running_ctx >= 0) mark(lane);
  }
  if (active_count == 1) {
    AdvanceLane(s, device, only, start, now_ns);
  } else if (active_count > 1) {
    for (int64_t t = start; t < now_ns;) {
      CloseWindows(s, device, t);
      const int64_t end = std::min(now_ns, d.window_start_ns + s.params.sample_ns);
      for (int lane = 0; lane < kSchedLanes; ++lane) {
        if (active[lane]) AdvanceLane(s, device, lane, t, end);
      }
      t = end;
    }
  }

  FinishAdvance(s, device, start, busy_before, now_ns);
}

uint64_t EnqueueOp(SimState& s, int ctx, int64_t duration_ns, int32_t event_slot, int64_t now_ns) {
  ContextRecord& c = s.contexts[ctx];
  assert(c.count < kQueueCapacity);
  const uint64_t seq = c.next_seq++;
  if (event_slot >= 0 && c.count == 0) {  // nothing before it: complete now
    c.event_time_ns[event_slot] = now_ns;
    c.event_done_seq[event_slot] = seq;
    c.completed_seq = seq;
    return seq;
  }
  assert(event_slot >= 0 || duration_ns > 0);
  c.queue[(c.head + c.count) % kQueueCapacity] = {seq, event_slot >= 0 ? 0 : duration_ns,
                                                  event_slot, 0};
  ++c.count;
  return seq;
}

int64_t CompletionLowerBoundNs(const SimState& s, int ctx, uint64_t seq) {
  const ContextRecord& c = s.contexts[ctx];
  if (seq <= c.completed_seq) return 0;
  int64_t work = 0;
  for (uint32_t i = 0; i < c.count; ++i) {
    const QueuedOp& op = c.queue[(c.head + i) % kQueueCapacity];
    if (op.seq > seq) break;
    work += op.remaining_ns;
  }
  const SchedLane& d = s.devices[c.device].lanes[c.lane];
  if (d.running_ctx == ctx) {
    work += std::max<int64_t>(0, d.switch_end_ns - s.devices[c.device].sched_ns);
  } else if (d.last_ctx != ctx) {
    work += s.params.switch_ns;
  }
  return work;
}

void DropQueuedWork(SimState& s, int ctx, int64_t now_ns) {
  ContextRecord& c = s.contexts[ctx];
  for (uint32_t i = 0; i < c.count; ++i) {
    QueuedOp& op = c.queue[(c.head + i) % kQueueCapacity];
    if (op.event_slot >= 0) {
      c.event_time_ns[op.event_slot] = now_ns;
      c.event_done_seq[op.event_slot] = op.seq;
    }
  }
  c.count = 0;
  c.completed_seq = c.next_seq - 1;
  SchedLane& l = s.devices[c.device].lanes[c.lane];
  if (l.running_ctx == ctx) Release(l);
}

}  // namespace gpuslice::sim
