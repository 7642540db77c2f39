// What the MPS manager says to an MPS v3 control daemon (DESIGN.md section
// 5a; docs/daemon.md "MPS v3"): one server, kV3Server, per GPU's daemon, and
// one namespace per tenant that holds the tenant's thread percentage,
// pinned memory limit and client priority. Pure text; no I/O.
#pragma once

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

// The pipe directory a tenant's processes use to reach its namespace.
std::string V3TenantPipeDir(const std::string& pipe_dir, const std::string& tenant);

}  // namespace gpuslice::daemon::mps
