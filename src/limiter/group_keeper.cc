#include "limiter/group_keeper.h"

#include <pthread.h>

#include <algorithm>
#include <csignal>

#include "common/clock.h"
#include "common/log.h"
#include "limiter/compute_controller.h"

namespace gpuslice::limiter {
namespace {

void* Run(void* arg) {
  auto* segment = static_cast<GroupSegment*>(arg);
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  if (Status s = segment->WaitToBecomeController(); !s.ok()) {
    GS_LOG(kWarn, "limiter", "group keeper stopped: %s", s.message().c_str());
    return nullptr;
  }
  GS_LOG(kInfo, "limiter", "this process now keeps group '%s'", segment->group().c_str());
  ComputeController compute(segment);
  const int64_t period_ns = std::chrono::nanoseconds(GroupKeeper::kPeriod).count();
  int64_t next_reap = 0;
  for (;;) {
    // Read before deciding, so a limit set meanwhile ends the wait at once.
    const uint32_t seen = segment->ChangeWord();
    const int64_t now = MonotonicNs();
    if (now >= next_reap) {
      if (int n = segment->ReapDead(); n > 0) {
        GS_LOG(kInfo, "limiter", "reclaimed the memory of %d departed member(s)", n);
      }
      segment->Beat(now);
      next_reap = now + period_ns;
    }
    const int64_t tick_ns =
        compute.Tick() ? std::chrono::nanoseconds(ComputeController::kPeriod).count() : period_ns;
    segment->WaitForChange(seen, std::min(tick_ns, next_reap - MonotonicNs()));
  }
}

}  // namespace

bool GroupKeeper::Start(GroupSegment* segment) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, size_t{256} * 1024);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, &Run, segment);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    GS_LOG(kWarn, "limiter", "cannot start the group keeper thread (error %d)", rc);
    return false;
  }
  pthread_setname_np(thread, "gpuslice-keeper");
  return true;
}

}  // namespace gpuslice::limiter
