// Registrar: when a limiter registers with gpusliced, and when again
// (DESIGN.md section 4, issue 12 "Registry"). The exchange itself is the
// Send callback (daemon_client.h's Register in the limiter).
//
// Policy:
//  1. Nothing is sent while the daemon's socket file does not exist.
//  2. Unregistered with a socket present: an attempt at once, then every
//     kRetryPeriod while the daemon does not answer (or answers 5xx).
//  3. Registered (a 201, or a 409 for this process): nothing is sent until
//     the daemon changes, i.e. the socket file is replaced (a restarted
//     daemon binds a new one) or another daemon pid claims the group's
//     segment; then it registers again at once. A restarted daemon may
//     already have re-adopted the tenant from its checkpoint: the new
//     registration is then answered 201 (or 409) too.
//  4. Refused (another 4xx): no retries with that daemon (it would refuse
//     again, and each refusal is an event); a changed daemon gets a new try.
//  5. The socket file gone: unregistered (the daemon stopped); rule 2 again
//     when it returns.
// While not registered the limiter keeps its own limits and the group's
// members control it (self-control); the daemon's heartbeat decides who
// controls the group, not this class.
//
// Not thread-safe: one instance, stepped by one thread. Time is injected:
// Step() does what is due at the clock's now and says when to step next.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/clock.h"
#include "limiter/daemon_client.h"

namespace gpuslice::limiter {

// What the limiter can see of the daemon without asking it.
struct DaemonObservation {
  bool socket_present = false;
  uint64_t socket_id = 0;  // identity of the socket file (device, inode, change time)
  int32_t daemon_pid = 0;  // the daemon whose claim on the group is fresh; 0: none
};

class Registrar {
 public:
  static constexpr std::chrono::seconds kRetryPeriod{2};
  // How often a limiter looks for a changed daemon (registered or refused)
  // or for its socket (absent).
  static constexpr std::chrono::seconds kWatchPeriod{1};

  enum class State { kUnregistered, kRegistered, kRefused };

  using Send = std::function<RegistrationResult(const RegistrationRequest&)>;
  using Observe = std::function<DaemonObservation()>;
  // Applies the limits a 201 granted (the limiter lowers its segment's).
  using Apply = std::function<void(const std::vector<EffectiveLimit>&)>;

  // REQUIRES: the callbacks are callable and `clock` outlives the registrar.
  Registrar(RegistrationRequest request, Send send, Observe observe, Apply apply,
            const Clock& clock);

  // Does what is due now; returns the nanoseconds until the next step is due.
  int64_t Step();

  State state() const { return state_; }
  int attempts() const { return attempts_; }

 private:
  bool DaemonChanged(const DaemonObservation& seen) const;
  void Attempt(const DaemonObservation& seen, int64_t now);

  const RegistrationRequest request_;
  const Send send_;
  const Observe observe_;
  const Apply apply_;
  const Clock& clock_;

  State state_ = State::kUnregistered;
  int attempts_ = 0;
  int64_t next_attempt_ns_ = 0;
  // The daemon last answered (registered or refused with).
  uint64_t socket_id_ = 0;
  int32_t daemon_pid_ = 0;
};

}  // namespace gpuslice::limiter
