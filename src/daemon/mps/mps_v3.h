// What the MPS manager says to an MPS v3 control daemon (DESIGN.md section
// 5a; docs/mps.md "MPS v3"): one server, kV3Server, per GPU's daemon, and
// one namespace per tenant that holds the tenant's thread percentage,
// pinned memory limit and client priority. Pure text; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuslice::daemon::mps {

struct TenantSettings;

inline constexpr char kV3Server[] = "gpuslice";

// The configuration (`nvidia-cuda-mps-control -p 3 -a FILE`) of the daemon of
// GPU `uuid`: its one server, allowed that GPU, and a namespace per tenant.
// REQUIRES: tenant names are valid (ValidateTenantName) and settings too.
std::string V3Config(const std::string& uuid,
                     const std::vector<std::pair<std::string, TenantSettings>>& tenants);

// `namespace <verb> --server=gpuslice --name=<tenant> [limits]`; verb is
// "create", "set" or "delete" (no limits).
std::string V3NamespaceCommand(std::string_view verb, const std::string& tenant,
                               const TenantSettings* settings);

// MPS v3 static SM partitions (docs/mps.md "SM partitions"). NVIDIA
// documents that partitions can be made after start, and `chunks` as their
// size, not the verbs' options nor their replies: these are the simulator's
// (docs/sim-mps.md "MPS v3").
// `sm_partition <verb> --server=gpuslice --device=<uuid> --name=<tenant>
// [--chunks=<n>]`; verb "create" (chunks > 0) or "delete".
std::string V3SmPartitionCommand(std::string_view verb, const std::string& uuid,
                                 const std::string& tenant, uint32_t chunks);
// `sm_partition info --server=gpuslice`, and `sm_partition list ...`.
std::string V3SmPartitionInfoCommand();
std::string V3SmPartitionListCommand();

// One device's line of `sm_partition info`.
struct V3DeviceSms {
  uint32_t sms = 0;
  uint32_t sms_per_chunk = 0;  // > 0
  uint32_t free_chunks = 0;
};
// The line of `uuid` in an `sm_partition info` reply; nullopt if none parses.
std::optional<V3DeviceSms> ParseV3SmPartitionInfo(std::string_view reply, std::string_view uuid);
// The SMs of partition `name` on `uuid` in an `sm_partition list` reply.
std::optional<uint32_t> ParseV3SmPartitionSms(std::string_view reply, std::string_view uuid,
                                              std::string_view name);
// The chunks a partition of `percent` of the device's SMs gets: rounded
// down (a partition never exceeds its share), at least one.
uint32_t V3PartitionChunks(const V3DeviceSms& device, uint32_t percent);

// The pipe directory a tenant's processes use to reach its namespace.
std::string V3TenantPipeDir(const std::string& pipe_dir, const std::string& tenant);

}  // namespace gpuslice::daemon::mps
