// The data of `gpuslice top`: what one poll of the node gathered (a Sample),
// and TopModel, which keeps the samples' history (a short series of measured
// shares per group and GPU), derives each group's state and gives the rows
// sorted and filtered. Pure: no socket, no terminal, no clock of its own (the
// sample carries its time), so it is tested on samples made in the test.
//
// Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpuslice::cli::top {

// A MIG instance of a GPU in MIG mode (GET /v1/mig).
struct MigSlot {
  std::string profile;                  // "1g.20gb"
  std::string owner;                    // "group/train"; "" for one gpusliced did not make
  std::optional<uint64_t> memory_used;  // bytes
  uint64_t memory_total = 0;            // bytes
};

// One GPU. Only the daemon (GET /v1/gpus) knows more than its UUID: with
// segments alone the other fields are absent and `index` is -1.
struct GpuInfo {
  int index = -1;
  std::string uuid;  // "GPU-…"
  std::string name;
  std::optional<double> util_percent;
  std::optional<uint64_t> memory_used, memory_total;  // bytes
  std::optional<double> power_watts, power_limit_watts;
  std::vector<MigSlot> mig;  // its MIG instances, in MIG mode
};

// A group on one GPU (a row of the group table).
struct GroupOnGpu {
  std::string group;
  std::string uuid;                       // the GPU's
  int gpu_index = -1;                     // -1: not known (segments only)
  std::optional<uint32_t> compute_limit;  // percent; absent: none
  std::optional<double> request_percent;  // the scheduler's request; absent: not known
  std::optional<double> grant_percent;    // the scheduler's current grant; absent: none
  std::optional<double> share_percent;    // measured share of the GPU; absent: not measured
  uint64_t memory_used = 0;               // bytes
  std::optional<uint64_t> memory_limit;   // bytes; absent: none
  int members = 0;                        // live processes / registered tenants
  bool paused = false;                    // gpusliced paused the group
  std::optional<uint64_t> throttled;      // launches that waited for budget (cumulative)
};

// A member of a group (a registered tenant, or a segment member).
struct TenantInfo {
  std::string group;
  int32_t pid = 0;                      // host pid (daemon), or the member's own (segments)
  std::string name;                     // pod ("ns/name"), else the process name
  uint64_t memory_used = 0;             // bytes, all GPUs
  std::optional<double> share_percent;  // of its GPUs' SMs, summed; absent: no sample
};

// What one poll of the node gathered.
struct Sample {
  int64_t at_ns = 0;             // CLOCK_REALTIME of the poll
  bool daemon_used = true;       // false with --no-daemon
  bool daemon_answered = false;  // the GETs succeeded
  std::string daemon_error;      // why not (when used and not answered)
  std::string socket;            // the daemon's
  bool nvml = false;             // without the daemon: the GPUs are NVML's
  std::string nvml_error;        // why NVML could not be read (then only segment GPUs)
  std::vector<GpuInfo> gpus;
  std::vector<GroupOnGpu> groups;
  std::vector<TenantInfo> tenants;
};

enum class GroupState { kRunning, kThrottled, kPaused, kIdle };
const char* StateName(GroupState s);

// Columns `s` cycles through, in that order.
enum class SortKey { kGroup, kGpu, kShare, kMemory, kLimit, kState };
inline constexpr int kSortKeyCount = 6;
const char* SortKeyName(SortKey k);
SortKey NextSortKey(SortKey k);

// A row of the group table: the group on a GPU as last sampled, its state and
// its recent measured shares (oldest first; -1 where none was measured).
struct GroupRow {
  GroupOnGpu group;
  GroupState state = GroupState::kIdle;
  std::vector<double> history;
};

// Blocks of a bar `width` cells wide for the groups on one GPU: (group,
// cells), in the order of `rows`, each group's cells its measured share of
// `width` (rounded; shares over 100% in total are scaled down). The rest of
// the bar is free.
std::vector<std::pair<std::string, int>> ShareBar(const std::vector<GroupRow>& rows, int width);

// Where each group's request falls on the bar ShareBar draws for the same
// `rows` and `width`: (group, cell), the last cell the group's block would
// have if its share were its request (the block's start plus the request's
// cells, clamped into the bar). A group below its request has its marker
// past its block; groups without a request (or a request of 0) have none.
std::vector<std::pair<std::string, int>> RequestMarkers(const std::vector<GroupRow>& rows,
                                                        int width);

// `values` (percent 0..100, -1: none) as a sparkline of their last `width`
// values, one character each: Unicode blocks "▁".."█", or ASCII "_.:-=+*#"
// when `ascii`; a missing value is a space. Shorter when fewer values.
std::string Sparkline(const std::vector<double>& values, size_t width, bool ascii);

class TopModel {
 public:
  // Keeps the last `history` shares of each group on each GPU.
  explicit TopModel(size_t history = 60) : history_(history) {}

  // Takes a new sample: appends each row's share to its history (a row no
  // longer present loses its history), derives states against the previous
  // sample, and notes whether the daemon answered. A GPU the sample knows
  // by UUID alone (the daemon went away) keeps the index and name the daemon
  // last gave it.
  void Update(Sample sample);

  const Sample& sample() const { return sample_; }
  int updates() const { return updates_; }

  // The groups on GPUs whose group id contains `filter` (any case; "" keeps
  // all), sorted by `key`: names and GPUs ascending, the others descending;
  // ties by group then GPU.
  std::vector<GroupRow> Rows(SortKey key, const std::string& filter) const;

  // The rows of one GPU (by UUID), for its share bar; by group id.
  std::vector<GroupRow> RowsOnGpu(const std::string& uuid) const;

  // The tenants of `group`, by pid.
  std::vector<TenantInfo> TenantsOf(const std::string& group) const;

  // Where the data comes from, for the header: the daemon, or the segments
  // and why ("gpusliced stopped answering …" once it answered and then did
  // not; the sample keeps coming from the segments).
  std::string SourceLine() const;
  // The daemon answered an earlier sample but not the last one.
  bool daemon_lost() const { return daemon_seen_ && !sample_.daemon_answered; }

 private:
  using Key = std::pair<std::string, std::string>;  // group, GPU UUID

  size_t history_;
  Sample sample_;
  int updates_ = 0;
  bool daemon_seen_ = false;
  int64_t daemon_lost_at_ns_ = 0;
  std::map<Key, std::deque<double>> shares_;
  std::map<Key, GroupState> states_;
  std::map<Key, uint64_t> throttled_;          // the previous sample's counters
  std::map<std::string, GpuInfo> known_gpus_;  // by UUID, as the daemon last named them
};

// The state of a group on a GPU: paused if gpusliced paused it, else
// throttled if launches waited for budget since the previous sample
// (`previous_throttled` absent: no previous sample), else running while it
// has members, else idle.
GroupState DeriveState(const GroupOnGpu& g, std::optional<uint64_t> previous_throttled);

}  // namespace gpuslice::cli::top
