#include "limiter/registration_thread.h"

#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "limiter/registrar.h"

namespace gpuslice::limiter {
namespace {

// How the first attempt ended.
enum class FirstOutcome {
  kAnswered,    // registered or refused: the daemon answered
  kFailedFast,  // no daemon behind the socket (refused connection, 5xx): nothing to wait for
  kTimedOut,    // no answer within the wait
};

// Set once the registration thread's first step is done (the first attempt
// answered, given up on, or no socket to try); shared by that thread and the
// one that started it, so either may outlive the other.
struct FirstAnswer {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<FirstOutcome> outcome;

  void Signal(FirstOutcome o) {
    {
      std::lock_guard<std::mutex> lock(mu);
      outcome = o;
    }
    cv.notify_all();
  }
  // The first attempt's outcome, or kTimedOut once `wait` is over. The
  // attempt's own deadline is that wait, so it may end the wait itself: it
  // then says kTimedOut too.
  FirstOutcome Await(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, wait, [this] { return outcome.has_value(); })) {
      return FirstOutcome::kTimedOut;
    }
    return *outcome;
  }
};

struct Args {
  GroupSegment* segment;
  RegistrationRequest request;
  DaemonAddress endpoint;
  std::chrono::milliseconds first_deadline;
  std::shared_ptr<FirstAnswer> first;
};

DaemonObservation Observe(const GroupSegment& segment, const DaemonAddress& endpoint) {
  DaemonObservation seen;
  struct stat st {};
  if (endpoint.tcp()) {
    seen.socket_present = true;
    seen.socket_id = 1;
  } else if (stat(endpoint.unix_path.c_str(), &st) == 0) {
    seen.socket_present = true;
    seen.socket_id = (static_cast<uint64_t>(st.st_dev) << 40) ^ static_cast<uint64_t>(st.st_ino) ^
                     (static_cast<uint64_t>(st.st_ctim.tv_sec) * 1'000'000'007ull) ^
                     static_cast<uint64_t>(st.st_ctim.tv_nsec);
    if (seen.socket_id == 0) seen.socket_id = 1;
  }
  if (segment.control().DaemonClaims(MonotonicNs())) {
    seen.daemon_pid = segment.control().DaemonPid();
  }
  return seen;
}

void Apply(GroupSegment& segment, const std::vector<EffectiveLimit>& limits) {
  for (const EffectiveLimit& l : limits) {
    const int dev = segment.FindDevice(l.uuid);
    if (dev < 0) continue;  // a GPU this process did not attach
    if (l.memory_bytes) segment.LowerMemoryLimit(dev, *l.memory_bytes);
    if (l.compute_percent) segment.LowerComputeLimit(dev, *l.compute_percent);
  }
}

void SleepNs(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR) {
  }
}

void* Run(void* arg) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  try {
    // Never destroyed: the thread may run until the process is gone, after
    // static destructors.
    auto* args = static_cast<Args*>(arg);
    auto* clock = new MonotonicClock;
    GroupSegment* segment = args->segment;
    const DaemonAddress* endpoint = &args->endpoint;
    // The first exchange may take as long as the host waits for it.
    auto* deadline = new std::chrono::milliseconds(args->first_deadline);
    auto* registrar = new Registrar(
        args->request,
        [endpoint, deadline](const RegistrationRequest& r) {
          const std::chrono::milliseconds d = *deadline;
          *deadline = kRegistrationDeadline;
          return Register(*endpoint, r, d);
        },
        [segment, endpoint] { return Observe(*segment, *endpoint); },
        [segment](const std::vector<EffectiveLimit>& l) { Apply(*segment, l); }, *clock);
    const int64_t started_ns = clock->NowNs();
    const int64_t first_sleep = registrar->Step();
    const bool expired =
        clock->NowNs() - started_ns >= std::chrono::nanoseconds(args->first_deadline).count();
    args->first->Signal(registrar->state() != Registrar::State::kUnregistered
                            ? FirstOutcome::kAnswered
                        : expired ? FirstOutcome::kTimedOut
                                  : FirstOutcome::kFailedFast);
    args->first.reset();
    SleepNs(first_sleep);
    for (;;) SleepNs(registrar->Step());
  } catch (...) {
    if (auto& first = static_cast<Args*>(arg)->first) first->Signal(FirstOutcome::kFailedFast);
    // Out of memory, most likely: the process goes on unregistered.
    GS_LOG(kWarn, "limiter", "registration with gpusliced stopped (out of memory?)");
  }
  return nullptr;
}

}  // namespace

bool StartRegistrationThread(GroupSegment* segment, RegistrationRequest request,
                             DaemonAddress endpoint, std::chrono::milliseconds first_answer_wait) {
  // Nothing to wait for without a socket file: the daemon is not there.
  struct stat st {};
  const bool wait = first_answer_wait.count() > 0 &&
                    (endpoint.tcp() || stat(endpoint.unix_path.c_str(), &st) == 0);
  const std::string where = endpoint.Describe();
  Args* args = nullptr;
  std::shared_ptr<FirstAnswer> first;
  try {
    first = std::make_shared<FirstAnswer>();
    args = new Args{
        segment, std::move(request), std::move(endpoint),
        wait ? std::max(first_answer_wait, kRegistrationDeadline) : kRegistrationDeadline, first};
  } catch (...) {
    return false;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, size_t{256} * 1024);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, &Run, args);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    delete args;
    GS_LOG(kWarn, "limiter", "cannot start the registration thread (error %d)", rc);
    return false;
  }
  pthread_setname_np(thread, "gpuslice-reg");
  if (wait && first->Await(first_answer_wait) == FirstOutcome::kTimedOut) {
    GS_LOG(kWarn, "limiter",
           "no answer from gpusliced (%s) in %lld ms: starting under the environment's limits "
           "until it answers",
           where.c_str(), static_cast<long long>(first_answer_wait.count()));
  }
  return true;
}

}  // namespace gpuslice::limiter
