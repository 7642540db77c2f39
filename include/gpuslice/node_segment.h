// The node segment: one shared-memory file per node, written only by gpusliced
// and read by anyone (tenants' limiters, the CLI, monitoring agents) to learn
// every GPU's status without an NVML call (DESIGN.md section 3). This header is
// the layout contract between those processes; src/shm/node_segment.h is the
// code that writes and reads it.
//
// File: $GPUSLICE_SHM_DIR/node.v<kNodeSegmentVersion> (default dir
// /dev/shm/gpuslice), mode 0644, owned by the daemon. The layout version is
// part of the name, so processes built with different layouts never share a
// file.
//
// Lifecycle: at start the daemon writes a complete segment to a temporary
// file of the same directory and renames it into place, so a reader that can
// open the path always finds a whole, valid header; a previous daemon's file is
// replaced (readers that still map it see it stale and re-open the path).
// From then on the daemon updates it in place after every GPU sample. On a
// clean stop it sets daemon_pid to 0 (stale at once); a daemon that dies
// leaves updated_ns behind, and the segment goes stale kNodeStaleNs later.
//
// Layout rules: fixed-width fields, trivially copyable, magic + version + size
// first. The header is written once, before the rename, and never changes.
//
// Concurrency: a seqlock. Everything after `seq` is written only by the daemon
// (one writer thread), as 8-byte words through std::atomic_ref:
//   writer: seq = s + 1 (odd) ; store the words (release) ; seq = s + 2 (release)
//   reader: s1 = seq (acquire) ; load the words (acquire) ; s2 = seq
//           the copy is consistent iff s1 == s2 and s1 is even; else retry.
// (Release/acquire on each word instead of fences: plain moves on x86, and
// ThreadSanitizer understands them.)
// Readers never write the file (they map it read-only) and never block the
// daemon; a reader that loses the race too often gives up (kUnavailable).
#pragma once

#include <cstdint>
#include <type_traits>

namespace gpuslice {

inline constexpr uint64_t kNodeSegmentMagic = 0x444f4e5f534c5047;  // "GPLS_NOD"
inline constexpr uint32_t kNodeSegmentVersion = 1;

inline constexpr int kNodeMaxGpus = 16;
inline constexpr int kNodeUuidBytes = 48;  // "GPU-" + 36 + NUL, rounded up
inline constexpr int kNodeGpuNameBytes = 96;

// A node segment whose daemon has not updated it for this long is stale: the
// daemon is gone or wedged, and readers must not trust its values (the same
// bound as a group's daemon heartbeat, DESIGN.md section 3).
inline constexpr int64_t kNodeStaleNs = 2'000'000'000;

// NodeGpuStatus::mps.
enum class NodeMps : uint32_t { kOff = 0, kOn = 1, kRestarting = 2 };

struct NodeSegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t size;  // sizeof(NodeSegmentLayout)
};

// One GPU as the daemon last sampled it.
struct NodeGpuStatus {
  uint32_t index;                // NVML index
  uint32_t valid;                // 1: the entry holds a sample of this GPU; 0: never read
  char uuid[kNodeUuidBytes];     // "GPU-…", NUL-terminated
  char name[kNodeGpuNameBytes];  // product name, NUL-terminated (truncated if longer)
  uint64_t memory_total_bytes;   // as NVML reports them (the whole GPU, not a group's view)
  uint64_t memory_used_bytes;
  uint64_t memory_free_bytes;
  uint32_t sm_utilization_percent;  // NVML's utilization rates over its last window
  uint32_t memory_utilization_percent;
  uint32_t power_draw_mw;
  uint32_t power_limit_mw;
  uint32_t temperature_c;
  uint32_t sm_clock_mhz;
  uint32_t compute_mode;  // NVML value (0 default, 2 prohibited, 3 exclusive process)
  uint32_t mps;           // NodeMps
  int64_t sampled_ns;     // CLOCK_MONOTONIC of the read these values come from
  uint32_t read_failed;   // 1: the latest read failed; the values are older
  uint32_t reserved0;
  uint8_t reserved[32];
};

struct NodeSegmentLayout {
  NodeSegmentHeader header;
  uint64_t seq;  // the seqlock word: odd while the daemon writes
  // ---- below: written under the seqlock ----
  int32_t daemon_pid;  // the writer (in its own pid namespace); 0: it stopped cleanly
  uint32_t gpu_count;  // entries of gpus[] in use (<= kNodeMaxGpus)
  int64_t updated_ns;  // CLOCK_MONOTONIC of the daemon's last update
  uint64_t updates;    // number of updates since the file was made
  uint8_t reserved[16];
  NodeGpuStatus gpus[kNodeMaxGpus];
};

static_assert(std::is_trivially_copyable_v<NodeSegmentLayout>);
static_assert(sizeof(NodeSegmentHeader) == 16);
static_assert(sizeof(NodeGpuStatus) == 256);
static_assert(sizeof(NodeSegmentLayout) == 64 + kNodeMaxGpus * 256);
static_assert(sizeof(NodeSegmentLayout) % 8 == 0 && alignof(NodeSegmentLayout) == 8,
              "the seqlock copies whole 8-byte words");

}  // namespace gpuslice
