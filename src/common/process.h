// Identity of processes across pid reuse: a (pid, start time) pair names one
// process for its whole life. Used by every cross-process ledger.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace gpuslice {

// The process's start time in clock ticks since boot (field 22 of
// /proc/<pid>/stat), or 0 if the process does not exist.
uint64_t ProcessStartTime(pid_t pid);

// True if `pid` exists, is not a zombie, and started at `start_time`
// (start_time 0 skips that check).
bool ProcessAlive(pid_t pid, uint64_t start_time);

// The short command name (/proc/<pid>/comm) into `out` (NUL-terminated,
// truncated to `size`); empty if unknown.
void ProcessName(pid_t pid, char* out, size_t size);

}  // namespace gpuslice
