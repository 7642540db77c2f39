#include "common/assert.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace gpuslice {
namespace {

std::atomic<uint64_t> g_bugs{0};
// -1: not decided yet; 0/1: fatal or not.
std::atomic<int> g_fatal{-1};
constexpr uint64_t kLoggedBugs = 16;  // then only counted

bool DefaultFatal() {
#ifndef NDEBUG
  return true;
#else
  // Read on the first bug only: by then the process is past its start-up and
  // getenv is safe in the limiter too.
  const char* v = std::getenv("GPUSLICE_FATAL_BUGS");  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr && std::strcmp(v, "1") == 0;
#endif
}

}  // namespace

uint64_t BugCount() { return g_bugs.load(std::memory_order_relaxed); }

bool BugsFatal() {
  int f = g_fatal.load(std::memory_order_acquire);
  if (f < 0) {
    int expected = -1;
    g_fatal.compare_exchange_strong(expected, DefaultFatal() ? 1 : 0, std::memory_order_acq_rel);
    f = g_fatal.load(std::memory_order_acquire);
  }
  return f == 1;
}

void SetBugsFatal(bool fatal) { g_fatal.store(fatal ? 1 : 0, std::memory_order_release); }

namespace assert_internal {

void AssertFailed(const char* file, int line, const char* expr, const char* what) {
  log_internal::Write(LogLevel::kError, "assert", "%s:%d: GS_ASSERT(%s) failed: %s", file, line,
                      expr, what);
  std::abort();
}

bool BugFired(const char* file, int line, const char* expr, const char* what) {
  const uint64_t n = g_bugs.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n <= kLoggedBugs) {
    log_internal::Write(LogLevel::kError, "bug", "%s:%d: bug %s%s%s(#%llu): %s", file, line,
                        *expr != 0 ? "(" : "", expr, *expr != 0 ? ") " : "",
                        static_cast<unsigned long long>(n), what);
  }
  if (BugsFatal()) std::abort();
  return true;
}

}  // namespace assert_internal
}  // namespace gpuslice
