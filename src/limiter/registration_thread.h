// The limiter's registration with gpusliced, on a thread of its own
// (DESIGN.md section 4; the policy is Registrar's, the exchange
// daemon_client.h's Register).
//
// Why a thread of its own and not the caller's or the keeper's: the host's
// first CUDA call must never wait for a daemon (the exchange is bounded, but
// a hung daemon would still cost each attaching process its deadline), and
// the keeper thread runs the group's compute controller when the daemon is
// away, whose ticks must not stall behind a slow daemon either. The thread
// sleeps between steps (a look at the socket file and the segment every
// second, an attempt every 2 s while unregistered) and is cheap otherwise.
//
// The one wait (issue 17): the thread that starts registration waits, bounded,
// for the first attempt's answer, so that a container's first allocation and
// first launch are judged by the limits the daemon grants and not by the
// environment's alone. With no socket file there is nothing to wait for; a
// daemon that does not answer within the bound costs the host that bound,
// once, and one warning (the registration goes on on its thread).
//
// Like the keeper thread it blocks every signal and is detached: it never
// delays the host's exit. A forked child starts its own (it is a new process
// and registers itself).
#pragma once

#include <chrono>
#include <string>

#include "limiter/daemon_client.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {

// Starts registering `request` with the daemon at `endpoint` on a new
// thread; limits the daemon grants lower `segment`'s. Over TCP there is no
// socket file to watch: the daemon counts as present (each attempt finds out)
// and a restart is seen by the daemon's claim on the segment alone. `segment` must outlive
// the process (the limiter never frees it). Returns false if no thread could
// be started (the process then runs under its own limits, unregistered).
//
// `first_answer_wait` > 0 with the daemon's socket file present (or a TCP
// endpoint): the first exchange gets that long (at least the usual
// kRegistrationDeadline) and the caller returns only once it is answered,
// its limits applied, or the wait is over (then one warning is logged).
// 0, or no socket file: returns at once.
bool StartRegistrationThread(GroupSegment* segment, RegistrationRequest request,
                             DaemonAddress endpoint,
                             std::chrono::milliseconds first_answer_wait = {});

// Default of GPUSLICE_REGISTER_WAIT_MS, and its greatest value.
inline constexpr std::chrono::milliseconds kDefaultFirstAnswerWait{2000};
inline constexpr std::chrono::milliseconds kMaxFirstAnswerWait{60000};

}  // namespace gpuslice::limiter
