#include "limiter/registrar.h"

#include <utility>

#include "common/log.h"

namespace gpuslice::limiter {
namespace {

constexpr int64_t Ns(std::chrono::nanoseconds d) { return d.count(); }

}  // namespace

Registrar::Registrar(RegistrationRequest request, Send send, Observe observe, Apply apply,
                     const Clock& clock)
    : request_(std::move(request)),
      send_(std::move(send)),
      observe_(std::move(observe)),
      apply_(std::move(apply)),
      clock_(clock) {}

bool Registrar::DaemonChanged(const DaemonObservation& seen) const {
  if (seen.socket_id != socket_id_) return true;
  return seen.daemon_pid != 0 && daemon_pid_ != 0 && seen.daemon_pid != daemon_pid_;
}

int64_t Registrar::Step() {
  const int64_t now = clock_.NowNs();
  const DaemonObservation seen = observe_();
  if (!seen.socket_present) {
    if (state_ == State::kRegistered) {
      GS_LOG(kInfo, "limiter",
             "gpusliced's socket is gone: group '%s' keeps its own limits until it returns",
             request_.group.c_str());
    }
    state_ = State::kUnregistered;
    next_attempt_ns_ = 0;  // at once when the socket appears
    return Ns(kWatchPeriod);
  }
  if (state_ != State::kUnregistered) {
    if (!DaemonChanged(seen)) {
      if (daemon_pid_ == 0) daemon_pid_ = seen.daemon_pid;  // the daemon that answered, now seen
      return Ns(kWatchPeriod);
    }
    GS_LOG(kInfo, "limiter", "gpusliced changed (restarted): registering again");
    state_ = State::kUnregistered;
    next_attempt_ns_ = 0;
  }
  if (now < next_attempt_ns_) return next_attempt_ns_ - now;
  Attempt(seen, now);
  return Ns(state_ == State::kUnregistered ? kRetryPeriod : kWatchPeriod);
}

void Registrar::Attempt(const DaemonObservation& seen, int64_t now) {
  ++attempts_;
  const RegistrationResult result = send_(request_);
  switch (result.outcome) {
    case RegistrationResult::Outcome::kRegistered:
      state_ = State::kRegistered;
      socket_id_ = seen.socket_id;
      daemon_pid_ = seen.daemon_pid;
      GS_LOG(kInfo, "limiter", "registered with gpusliced as tenant of group %s%s",
             request_.group.c_str(), result.http_status == 409 ? " (it knew this process)" : "");
      if (!result.schedule_refused.empty()) {
        GS_LOG(kWarn, "limiter", "gpusliced did not apply the requested schedule to group %s: %s",
               request_.group.c_str(), result.schedule_refused.c_str());
      }
      apply_(result.effective_limits);
      return;
    case RegistrationResult::Outcome::kRefused:
      state_ = State::kRefused;
      socket_id_ = seen.socket_id;
      daemon_pid_ = seen.daemon_pid;
      GS_LOG(kWarn, "limiter",
             "gpusliced refused the registration in group %s (HTTP %d: %s); this process keeps "
             "its own limits",
             request_.group.c_str(), result.http_status, result.message.c_str());
      return;
    case RegistrationResult::Outcome::kUnavailable:
      state_ = State::kUnregistered;
      next_attempt_ns_ = now + Ns(kRetryPeriod);
      GS_LOG(kDebug, "limiter", "gpusliced not reachable (%s); retrying in %lld s",
             result.message.c_str(), static_cast<long long>(kRetryPeriod.count()));
      return;
  }
}

}  // namespace gpuslice::limiter
