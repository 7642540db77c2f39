// XidWatch: the XID errors NVML reports for the node's GPUs, watched on a
// thread of its own (docs/kubelet.md "GPU health"; docs/sim.md "XID
// errors" for the simulator's side).
//
// A Source hands out events (NvmlXidSource: an NVML event set registered for
// nvmlEventTypeXidCriticalError on every GPU that supports it, waited on with
// nvmlEventSetWait_v2). Each event counts on its GPU; a critical one makes the
// GPU unhealthy until the daemon restarts (as NVIDIA's device plugin does: a
// GPU that has fallen off the bus or lost its memory's integrity needs a reset
// and a look by a person, not a timer).
//
// Critical: every XID except the application errors NVIDIA's k8s device
// plugin skips (internal/rm/health.go): 13 (graphics engine exception), 31
// (GPU memory page fault), 43 (GPU stopped processing), 45 (preemptive
// cleanup, due to previous errors), 68 (video processor exception), 109
// (context switch timeout). Those are one process's fault; the GPU serves the
// others (NVIDIA's XID catalog lists them as user-application errors).
//
// Thread-safe: Of() from any thread; Start/Stop from one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace gpuslice::daemon {

// Whether XID `xid` means the GPU itself is in trouble (see above).
bool IsCriticalXid(uint64_t xid);

// What was seen on one GPU.
struct XidState {
  uint64_t errors = 0;    // XID events
  uint32_t last = 0;      // the last XID; 0: none
  uint32_t critical = 0;  // the last critical XID; 0: none (the GPU is healthy)

  bool operator==(const XidState&) const = default;
};

class XidWatch {
 public:
  struct Event {
    uint32_t index;  // the GPU's NVML index
    uint64_t xid;
  };
  class Source {
   public:
    virtual ~Source() = default;
    // The next event, or nullopt when `timeout` passed without one. An error
    // ends the watch (logged; what was seen stays).
    virtual StatusOr<std::optional<Event>> Wait(std::chrono::milliseconds timeout) = 0;
  };

  // `wait` bounds each Source::Wait, and so how long Stop() takes.
  explicit XidWatch(std::unique_ptr<Source> source,
                    std::chrono::milliseconds wait = std::chrono::milliseconds(500));
  ~XidWatch();  // Stop()s
  XidWatch(const XidWatch&) = delete;
  XidWatch& operator=(const XidWatch&) = delete;

  void Start();
  void Stop();

  // GPU `index`'s XIDs so far.
  XidState Of(uint32_t index) const;
  // Counts one event (the watch thread's path; tests may call it).
  void Record(const Event& event);

 private:
  void Run();

  std::unique_ptr<Source> source_;
  const std::chrono::milliseconds wait_;
  mutable Mutex mu_;
  std::map<uint32_t, XidState> seen_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpuslice::daemon
