// FakeSignaller: records the signals the backstop would send (tests).
// Tracks which processes it holds stopped, as the kernel would.
#pragma once

#include <csignal>
#include <set>
#include <vector>

#include "daemon/backstop/signaller.h"

namespace gpuslice::daemon {

class FakeSignaller final : public Signaller {
 public:
  struct Sent {
    pid_t pid;
    int sig;
    bool operator==(const Sent&) const = default;
  };
  bool Send(const ProcessRef& process, int sig) override {
    if (process.pid <= 0 || gone.contains(process.pid)) return false;
    sent.push_back({process.pid, sig});
    if (sig == SIGSTOP) stopped.insert(process.pid);
    if (sig == SIGCONT) stopped.erase(process.pid);
    return true;
  }
  // The signals sent to `pid`, in order.
  std::vector<int> To(pid_t pid) const {
    std::vector<int> out;
    for (const Sent& s : sent) {
      if (s.pid == pid) out.push_back(s.sig);
    }
    return out;
  }

  std::vector<Sent> sent;
  std::set<pid_t> stopped;
  std::set<pid_t> gone;  // processes that no longer exist (Send fails)
};

}  // namespace gpuslice::daemon
