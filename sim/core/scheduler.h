// The time-slicing model (DESIGN.md section 7), as pure functions over
// SimState: no clock, no locking, no syscalls. SimGpu calls them under the
// state mutex with the current monotonic time; unit tests call them with
// simulated time.
//
// Model: per device, contexts with queued kernels run round-robin. A context
// runs for at most `timeslice_ns`, then is preempted (its kernel resumes later)
// if another context has work; a context that runs dry yields early. Changing
// the executing context costs `switch_ns`, during which nothing executes.
// A context's ops run in FIFO order.
//
// MPS: the client contexts of one MPS server on a device form one scheduling
// group, time-sliced against the other groups like a single context (the
// server's context). Inside the group the clients' head kernels run
// concurrently: each at full speed while the members with work have thread
// percentages summing to <= 100, else each at 100/sum of full speed. Each
// member's busy time counts the time its kernel executed; the device's busy
// time counts the time any did; NVML samples credit the server's process.
//
// MIG: on a GPU in MIG mode each MIG device is a lane of its own (state.h
// SchedLane): its contexts time-slice as above among themselves, and the
// lanes run side by side; the device's busy time and windows add them up.
// Out of MIG mode every context is on lane 0.
#pragma once

#include <cstdint>

#include "sim/core/state.h"

namespace gpuslice::sim {

// Advances device `device`'s schedule from its sched_ns to `now_ns`:
// executes, completes and accounts work (busy time, kernels, energy,
// utilization windows). No-op if now_ns <= sched_ns.
void AdvanceDevice(SimState& state, int device, int64_t now_ns);

// Appends an op to context `ctx`'s queue at time `now_ns` (the device must have
// been advanced to now_ns). A marker (event_slot >= 0) on an empty queue
// completes at once. REQUIRES: count < params.max_pending for kernels;
// remaining_ns > 0 for kernels. Returns the op's seq.
uint64_t EnqueueOp(SimState& state, int ctx, int64_t duration_ns, int32_t event_slot,
                   int64_t now_ns);

// A lower bound on the time from now until op `seq` of `ctx` completes:
// the context's own queued work up to it, plus a switch if it is not running.
// 0 if already complete.
int64_t CompletionLowerBoundNs(const SimState& state, int ctx, uint64_t seq);

// Drops every queued op of `ctx` (the context is being destroyed or its process
// died); if it was running, the device goes idle. Pending markers complete.
void DropQueuedWork(SimState& state, int ctx, int64_t now_ns);

// Closes sampling windows of `device` whose end is <= now_ns (called by
// AdvanceDevice; exposed for tests).
void CloseWindows(SimState& state, int device, int64_t now_ns);

}  // namespace gpuslice::sim
