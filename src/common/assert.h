// Invariant checks, per the error policy of docs/errors.md:
//
//   GS_ASSERT(cond, "what broke")  a state that cannot happen and cannot be
//       survived: logs and aborts in every build. Daemon and tools only;
//       never on a path of the preloaded limiter (it would kill the host
//       program).
//   GS_BUG("what broke") / if (GS_BUG_IF(cond, "what broke")) { degrade }
//       a state that cannot happen but that the caller can survive by taking
//       its safe path (the limiter: pass the call through; the daemon: refuse
//       the request, keep the last good state). Logs (the first few times)
//       and counts every time (BugCount(), exported as gpuslice_bugs_total);
//       aborts only where bugs are set to be fatal: builds without NDEBUG,
//       and any process with GPUSLICE_FATAL_BUGS=1 in its environment (tests).
//
// Expected errors (the environment failing: ENOSPC, NVML_ERROR_GPU_IS_LOST, a
// peer that hangs) are neither: they are Status values, handled and counted.
// Thread-safe and allocation-free (usable in the limiter).
#pragma once

#include <cstdint>

namespace gpuslice {

// How many GS_BUG/GS_BUG_IF have fired in this process.
uint64_t BugCount();
// Whether a bug aborts this process (see above). Read once, on the first bug;
// SetBugsFatal overrides it (tests).
bool BugsFatal();
void SetBugsFatal(bool fatal);

namespace assert_internal {
[[noreturn]] void AssertFailed(const char* file, int line, const char* expr, const char* what);
// Counts, logs, aborts when bugs are fatal; returns true otherwise.
bool BugFired(const char* file, int line, const char* expr, const char* what);
}  // namespace assert_internal

}  // namespace gpuslice

#define GS_ASSERT(cond, what)                                                     \
  do {                                                                            \
    if (!(cond)) [[unlikely]]                                                     \
      ::gpuslice::assert_internal::AssertFailed(__FILE__, __LINE__, #cond, what); \
  } while (0)

#define GS_BUG(what) (void)::gpuslice::assert_internal::BugFired(__FILE__, __LINE__, "", what)

// True (after counting and logging) when `cond` holds, i.e. the bug happened.
#define GS_BUG_IF(cond, what) \
  ((cond) ? ::gpuslice::assert_internal::BugFired(__FILE__, __LINE__, #cond, what) : false)
