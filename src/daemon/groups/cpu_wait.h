// CpuWait: how long a group's processes wait for a CPU, from the kernel's
// scheduler statistics (/proc/<pid>/task/<tid>/schedstat, second field: the
// time the thread was runnable but not running, in nanoseconds).
//
// The share scheduler (control::ShareScheduler, Counters::cpu_wait_bp) takes
// a group that runs less than its grant as a device that cannot deliver, and
// lowers the capacity it hands out; a host with far more runnable threads
// than cores gives the same reading (its tenants cannot launch what they are
// granted) and would halve every grant. This tells the two apart.
//
// Thread-compatible: one instance, on the daemon's control thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpuslice::daemon {

class CpuWait {
 public:
  // How far back the share is measured (at least; the oldest sample within
  // twice this is used).
  static constexpr int64_t kWindowNs = 1'000'000'000;
  // A group's threads are read at most this often (Sample returns the last
  // figure in between): each read lists and reads every thread's file.
  static constexpr int64_t kReadEveryNs = 500'000'000;

  // `proc_root`: "/proc", or a fake tree in tests.
  explicit CpuWait(std::string proc_root) : proc_root_(std::move(proc_root)) {}

  // The run-queue wait of every thread of `pids`, in all (ns since each
  // started); nullopt if none could be read.
  std::optional<int64_t> RunDelayNs(const std::vector<int32_t>& pids) const;

  // Records `group`'s processes `pids` at `now_ns` (monotonic) and returns
  // how long they waited for a CPU over about the last kWindowNs, in basis
  // points of wall time (summed over threads, so it may exceed 10000);
  // -1 if not known yet (first sample, unreadable, or its processes changed).
  int32_t Sample(const std::string& group, const std::vector<int32_t>& pids, int64_t now_ns);

  // Forgets groups not in `live`.
  void Retain(const std::vector<std::string>& live);

 private:
  struct Point {
    int64_t t_ns;
    int64_t delay_ns;
  };
  struct History {
    std::vector<int32_t> pids;
    std::deque<Point> points;
    int32_t last_bp = -1;
  };
  std::string proc_root_;
  std::map<std::string, History> groups_;
};

}  // namespace gpuslice::daemon
