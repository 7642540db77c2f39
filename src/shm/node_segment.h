// The node segment's writer (gpusliced) and readers (tenants, tools):
// per-GPU status published once per daemon sample and read without NVML
// (include/gpuslice/node_segment.h has the layout and the seqlock protocol).
//
// NodeSegmentWriter makes a fresh segment at start (a temporary file renamed
// into place, so the path always names a whole segment) and updates it in
// place. NodeSegmentReader maps it read-only and returns consistent
// snapshots, saying whether the daemon behind them is stale.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "gpuslice/node_segment.h"

namespace gpuslice {

// One GPU's status as a value: what the daemon publishes and readers get.
// Strings longer than the layout's fields are truncated.
struct NodeGpu {
  uint32_t index = 0;
  bool valid = false;  // the entry holds a sample of this GPU
  std::string uuid;
  std::string name;
  uint64_t memory_total_bytes = 0;
  uint64_t memory_used_bytes = 0;
  uint64_t memory_free_bytes = 0;
  uint32_t sm_utilization_percent = 0;
  uint32_t memory_utilization_percent = 0;
  uint32_t power_draw_mw = 0;
  uint32_t power_limit_mw = 0;
  uint32_t temperature_c = 0;
  uint32_t sm_clock_mhz = 0;
  uint32_t compute_mode = 0;  // NVML value
  NodeMps mps = NodeMps::kOff;
  int64_t sampled_ns = 0;    // CLOCK_MONOTONIC of the read these values come from
  bool read_failed = false;  // the latest read failed; the values are from sampled_ns

  bool operator==(const NodeGpu&) const = default;
};

// A consistent view of the whole segment.
struct NodeStatus {
  pid_t daemon_pid = 0;    // 0: the daemon stopped cleanly
  int64_t updated_ns = 0;  // CLOCK_MONOTONIC of its last update
  uint64_t updates = 0;    // updates since the daemon made the segment
  int64_t age_ns = 0;      // now - updated_ns at the read (0 if updated_ns is ahead)
  bool stale = true;       // daemon_pid == 0, or age_ns > kNodeStaleNs
  uid_t owner_uid = 0;     // the file's owner (the daemon's uid; root in production)
  std::vector<NodeGpu> gpus;
};

class NodeSegmentWriter {
 public:
  // Makes the segment `dir`/node.v1 (creating `dir` like the group segments'
  // directory if missing) for daemon `pid`, replacing any previous one: the
  // new file is complete, with no GPUs and fresh as of `clock`, before it
  // appears under its name. Mode 0644, owned by the caller.
  // `clock` (CLOCK_MONOTONIC) must outlive the writer.
  static StatusOr<std::unique_ptr<NodeSegmentWriter>> Create(const std::string& dir, pid_t pid,
                                                             const Clock& clock);

  // The segment's path under `dir`.
  static std::string PathFor(const std::string& dir);

  // Leaves the file in place (readers see it go stale).
  ~NodeSegmentWriter();
  NodeSegmentWriter(const NodeSegmentWriter&) = delete;
  NodeSegmentWriter& operator=(const NodeSegmentWriter&) = delete;

  // Publishes `gpus` (at most kNodeMaxGpus; the rest are dropped) as of now.
  // Thread-safe (writes are serialised); never blocks on readers.
  void Publish(const std::vector<NodeGpu>& gpus);
  // Marks the segment stale at once (daemon_pid 0), keeping the last GPUs:
  // for a daemon that stops cleanly.
  void MarkStopped();

  const std::string& path() const { return path_; }

 private:
  NodeSegmentWriter(std::string path, NodeSegmentLayout* layout, pid_t pid, const Clock& clock);
  // Copies shadow_'s payload into the segment under the seqlock.
  void WriteLocked() REQUIRES(mu_);

  const std::string path_;
  NodeSegmentLayout* const layout_;  // the shared mapping
  const pid_t pid_;
  const Clock& clock_;
  Mutex mu_;
  NodeSegmentLayout shadow_ GUARDED_BY(mu_){};  // what the segment holds
};

class NodeSegmentReader {
 public:
  struct Options {
    // Staleness is judged against this clock (CLOCK_MONOTONIC; tests pass a
    // simulated one). Must outlive the reader; null: the real monotonic clock.
    const Clock* clock = nullptr;
    // Read attempts before giving up on a segment that is always mid-write.
    int max_attempts = 1000;
    // When set, a file not owned by this uid is refused (kPermissionDenied):
    // a reader that trusts only a root daemon passes 0, so a file another
    // local user planted under the name is never read.
    std::optional<uid_t> owner;
    // Test seam: runs before each retry with the number of the failed attempt (1-based).
    std::function<void(int)> on_retry;
  };

  // Maps `dir`/node.v1 read-only. kNotFound when there is no segment (no
  // daemon ever ran with this directory); kFailedPrecondition, naming the
  // file and the problem, when it is not a node segment of this layout (bad
  // magic, another version, wrong size); kPermissionDenied when it is not
  // owned by `options.owner`.
  static StatusOr<std::unique_ptr<NodeSegmentReader>> Open(const std::string& dir, Options options);
  static StatusOr<std::unique_ptr<NodeSegmentReader>> Open(const std::string& dir) {
    return Open(dir, Options{});
  }

  ~NodeSegmentReader();
  NodeSegmentReader(const NodeSegmentReader&) = delete;
  NodeSegmentReader& operator=(const NodeSegmentReader&) = delete;

  // A consistent snapshot. When the mapped segment is stale or stuck
  // mid-write and a newer daemon has replaced the file, the new file is
  // mapped and read instead. kUnavailable when every attempt found the
  // segment mid-write (its writer died while writing, or a bug);
  // kFailedPrecondition when the segment's contents are impossible
  // (gpu_count beyond kNodeMaxGpus). Thread-safe.
  StatusOr<NodeStatus> Read();

  const std::string& path() const { return path_; }

 private:
  struct Mapping;
  NodeSegmentReader(std::string path, Options options, std::unique_ptr<Mapping> mapping);
  // Maps the segment at `path` read-only after checking its owner and header.
  static StatusOr<std::unique_ptr<Mapping>> Map(const std::string& path,
                                                std::optional<uid_t> owner);
  StatusOr<NodeStatus> ReadMapping(const Mapping& m) const;

  const std::string path_;
  const Options options_;
  Mutex mu_;
  std::unique_ptr<Mapping> mapping_ GUARDED_BY(mu_);
};

}  // namespace gpuslice
