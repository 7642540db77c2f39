// ClaimReader: what the DRA plugin needs to know of a ResourceClaim when the
// kubelet asks it to prepare one (DESIGN.md section 5b). The kubelet names
// the claim (namespace, name, UID); its allocation result (the devices of
// this driver and, with consumable capacity, the memory and cores each
// consumes) and the pods it is reserved for live in the API server.
//
// Implementations: ApiClaimReader (the API server, through the daemon's
// Kubernetes client in src/daemon/kube), FileClaimReader (ResourceClaim
// objects as JSON files: tests and offline use) and fakes. ClaimInfoFromResourceClaim is the one
// parser of a resource.k8s.io/v1 ResourceClaim for all of them.
//
// Device names (the contract with the ResourceSlices this driver publishes):
// a GPU is published as DeviceNameOf(uuid), "gpu-" + the UUID's hex in lower
// case without its "GPU-" prefix; "gpu<index>" (the name the ResourceSlice
// publisher of src/daemon/kube gives) and "gpu-<index>" are also understood.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/tier.h"

namespace gpuslice::daemon::kubelet {

inline constexpr char kDriverName[] = "gpuslice.io";
// The names of the two consumable capacities of each published GPU.
inline constexpr char kMemoryCapacity[] = "memory";  // bytes
inline constexpr char kCoresCapacity[] = "cores";    // percent, 0..100

struct ClaimRef {
  std::string claim_namespace;
  std::string name;
  std::string uid;
};

// One device of this driver in a claim's allocation result.
struct ClaimDevice {
  std::string request;
  std::string pool;
  std::string device;
  std::optional<uint64_t> memory_bytes;   // consumedCapacity.memory; unset: none given
  std::optional<uint32_t> cores_percent;  // consumedCapacity.cores; unset: none given
};

struct ClaimInfo {
  std::vector<std::string> pod_uids;  // status.reservedFor entries of resource "pods"
  std::vector<ClaimDevice> devices;   // this driver's results only
  // The claim asks for the MPS tier: the last opaque configuration of this
  // driver (status.allocation.devices.config, the class's then the claim's,
  // as the scheduler copied them) that applies to one of its requests, a
  // SliceConfig:
  //   {"apiVersion": "gpuslice.io/v1alpha1", "kind": "SliceConfig",
  //    "tier": "mps" | "shared"}
  // Any other apiVersion, kind, field or tier is refused (kInvalidArgument
  // naming it; the kubelet shows it in the pod's events).
  Tier tier = Tier::kShared;
};

inline constexpr char kSliceConfigApiVersion[] = "gpuslice.io/v1alpha1";
inline constexpr char kSliceConfigKind[] = "SliceConfig";

class ClaimReader {
 public:
  virtual ~ClaimReader() = default;
  // kNotFound: no such claim; kFailedPrecondition: not allocated, or the
  // object's UID is not ref.uid (the claim was replaced); kUnavailable: the
  // source cannot be reached (the kubelet retries).
  virtual StatusOr<ClaimInfo> Read(const ClaimRef& ref) = 0;
};

// A Kubernetes quantity ("4Gi", "4294967296", "30", "1.5G", "500m", "4e9").
// kInvalidArgument when malformed or negative.
StatusOr<long double> ParseKubeQuantity(std::string_view text);

// The allocation of a resource.k8s.io/v1 (or v1beta2) ResourceClaim object
// for driver `driver`. Checks the object's UID against `ref.uid`.
StatusOr<ClaimInfo> ClaimInfoFromResourceClaim(const nlohmann::json& claim, const ClaimRef& ref,
                                               std::string_view driver = kDriverName);

// A SliceConfig's parameters (ClaimInfo::tier): the tier they ask for
// (shared when they name none); kInvalidArgument (prefixed by `where`) for
// anything else.
StatusOr<Tier> SliceConfigTier(const nlohmann::json& parameters, const std::string& where);

// ResourceClaim objects read from `dir`/<namespace>/<name>.json.
// ResourceClaims read from the API server:
// GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name> through
// `get` (the daemon passes its KubeClient's Get: its errors keep their codes,
// kNotFound for a claim that does not exist).
class ApiClaimReader final : public ClaimReader {
 public:
  using Get = std::function<StatusOr<nlohmann::json>(const std::string& path)>;
  explicit ApiClaimReader(Get get) : get_(std::move(get)) {}
  StatusOr<ClaimInfo> Read(const ClaimRef& ref) override;

 private:
  const Get get_;
};

class FileClaimReader final : public ClaimReader {
 public:
  explicit FileClaimReader(std::string dir) : dir_(std::move(dir)) {}
  StatusOr<ClaimInfo> Read(const ClaimRef& ref) override;

 private:
  std::string dir_;
};

// The published device name of the GPU `uuid` (a DNS label).
std::string DeviceNameOf(std::string_view uuid);

// A GPU of the node, as the DRA plugin matches device names against it.
struct NodeGpu {
  uint32_t index = 0;
  std::string uuid;
};
// The UUID of the GPU published as `device`, or kNotFound naming it.
StatusOr<std::string> ResolveDevice(std::string_view device, const std::vector<NodeGpu>& gpus);

}  // namespace gpuslice::daemon::kubelet
