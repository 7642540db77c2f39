// Reading a ResourceClaim's allocation from the API server, for the DRA
// kubelet plugin (src/daemon/kubelet/) to cross-check or complete what
// NodePrepareResources hands it (docs/kubernetes.md "Claims").
//
// GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>; the
// allocation is status.allocation.devices.results[], each with the pool,
// the device and, under consumable capacity (KEP-5075), consumedCapacity
// {memory, cores} as Kubernetes quantities.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/kube/kube_client.h"

namespace gpuslice::daemon::kube {

// A Kubernetes quantity ("4Gi", "4G" = 4*10^9, "1500m", "30", "1e3") as a
// whole number, rounded up. kInvalidArgument for anything else or a value
// beyond 2^63.
StatusOr<uint64_t> ParseKubeQuantity(std::string_view text);

struct ClaimDevice {
  std::string request;  // the claim's request this satisfies
  std::string driver;
  std::string pool;
  std::string device;
  std::string share_id;                   // set for a device allocated many times
  std::optional<uint64_t> memory_bytes;   // consumedCapacity.memory
  std::optional<uint32_t> cores_percent;  // consumedCapacity.cores

  bool operator==(const ClaimDevice&) const = default;
};

struct ClaimAllocation {
  std::string uid;
  std::string ns;
  std::string name;
  bool allocated = false;                      // status.allocation is set
  std::vector<ClaimDevice> devices;            // the results of `driver` only
  std::vector<std::string> reserved_for_pods;  // UIDs of status.reservedFor pods
};

// The allocation in a ResourceClaim object; results of other drivers are
// skipped. kInvalidArgument naming the field for a malformed claim or a bad
// quantity.
StatusOr<ClaimAllocation> ParseClaimAllocation(const nlohmann::json& claim,
                                               std::string_view driver = "gpuslice.io");

// The seam the kubelet side uses.
class ClaimReader {
 public:
  virtual ~ClaimReader() = default;
  // Errors as KubeClient's (kNotFound: no such claim).
  virtual StatusOr<ClaimAllocation> Read(const std::string& ns, const std::string& name) = 0;
};

// Over the API server. Thread-safe (as KubeClient).
class ApiClaimReader final : public ClaimReader {
 public:
  // REQUIRES: `client` outlives the reader.
  explicit ApiClaimReader(KubeClient& client, std::string driver = "gpuslice.io")
      : client_(client), driver_(std::move(driver)) {}
  StatusOr<ClaimAllocation> Read(const std::string& ns, const std::string& name) override;

 private:
  KubeClient& client_;
  const std::string driver_;
};

}  // namespace gpuslice::daemon::kube
