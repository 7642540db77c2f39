// Where `gpuslice top` gets a Sample: gpusliced's per-second "sample" event
// (FromDaemonSample; the bodies of GET /v1/gpus, /v1/groups, /v1/tenants, see
// DaemonFeed) or those GETs themselves (Collect), merged with the group
// segments this user can read (GroupSegment::Snapshot: measured share,
// paused, grant, throttled launches); the segments and NVML's GPUs when the
// daemon does not answer (or --no-daemon: LocalSample). The daemon client and
// the segment reader are injected so that the fallback is tested without a
// socket or a segment.
//
// Thread-compatible.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/daemon_client.h"
#include "cli/top/top_model.h"
#include "common/status.h"
#include "shm/group_segment.h"

namespace gpuslice::cli::top {

// The snapshots of every group segment that can be read.
using SegmentReader = std::function<std::vector<GroupSnapshot>()>;

// Reads the segments under `dir` (status's way: open without attaching, reap
// dead members, snapshot); segments that cannot be opened are skipped.
std::vector<GroupSnapshot> ReadSegments(const std::string& dir);

// Parts of a Sample from the daemon's bodies. A field the daemon leaves out
// (an older daemon: no "schedule", "grant_percent", "paused") stays absent.
std::vector<GpuInfo> ParseGpus(const nlohmann::json& gpus_body);
// Adds GET /v1/mig's instances ("gpus" of `mig_body`, or the sample's
// "mig") to the GPUs of the same UUID in `gpus`.
void AddMigInstances(const nlohmann::json& mig_gpus, std::vector<GpuInfo>& gpus);
std::vector<GroupOnGpu> ParseGroups(const nlohmann::json& groups_body,
                                    const std::vector<GpuInfo>& gpus);
std::vector<TenantInfo> ParseTenants(const nlohmann::json& tenants_body);

// Merges the segments into `sample`: a (group, GPU) the daemon reported takes
// the segment's measured share (when measured), grant (when the daemon gave
// none), throttled counter, paused flag (either says paused), memory ledger
// and limit; a (group, GPU) only a segment has is added, with its members as
// tenants when the daemon gave none for the group. GPUs only a segment names
// are added with their UUID alone.
void MergeSegments(const std::vector<GroupSnapshot>& segments, Sample& sample);

// One poll: asks the daemon through `client` (null: --no-daemon), then merges
// `segments()`. `socket` only names the daemon in the sample.
Sample Collect(const DaemonClient* client, const std::string& socket, const SegmentReader& segments,
               int64_t now_ns);

// A sample from the daemon's "sample" event data ({"gpus", "groups",
// "tenants", ...}) merged with `segments`; `socket` names the daemon.
Sample FromDaemonSample(const nlohmann::json& data, const std::string& socket,
                        const std::vector<GroupSnapshot>& segments, int64_t now_ns);

// A sample without the daemon: `gpus` (NVML's; empty when it cannot be read,
// `nvml_error` says why) and `segments`. `daemon_error`: why the daemon is
// not used ("" with --no-daemon, then `daemon_used` is false).
Sample LocalSample(std::vector<GpuInfo> gpus, const std::string& nvml_error, bool daemon_used,
                   const std::string& daemon_error, const std::string& socket,
                   const std::vector<GroupSnapshot>& segments, int64_t now_ns);

}  // namespace gpuslice::cli::top
