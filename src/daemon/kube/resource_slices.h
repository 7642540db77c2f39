// SlicePublisher: the node's GPUs as resource.k8s.io/v1 ResourceSlices
// (DESIGN.md section 5b; docs/kubernetes.md "ResourceSlices").
//
// One slice per GPU, named "<node>-gpuslice-gpu<index>", in the pool named by
// the node, driver "gpuslice.io", each holding one device "gpu<index>" with
//  - allowMultipleAllocations: true (DRA consumable capacity, KEP-5075:
//    resource.k8s.io/v1, on by default from Kubernetes 1.36, behind the
//    DRAConsumableCapacity feature gate on 1.34-1.35);
//  - capacity `memory` (bytes; requests in whole MiB from 1Mi to the GPU's
//    memory, default all of it) and `cores` (percent; 1..100 in steps of 1,
//    default 100): a claim that names neither gets the whole GPU;
//  - attributes uuid, productName, memory (bytes), and, when known,
//    computeCapability and driverVersion (versions).
// Slices are owned by the Node object (garbage-collected with it) when the
// node can be read.
//
// Publish is idempotent: when the slices on the server already say what
// `gpus` says it writes nothing; otherwise it bumps the pool's generation,
// creates or replaces (with the resourceVersion it read; a conflict is read
// again and retried once) every slice and deletes slices of GPUs gone.
//
// Not thread-safe: one caller at a time (the daemon's publisher thread).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/kube/kube_client.h"

namespace gpuslice::daemon::kube {

inline constexpr const char* kDriverName = "gpuslice.io";
inline constexpr const char* kResourceApi = "/apis/resource.k8s.io/v1";

struct SliceGpu {
  uint32_t index = 0;
  std::string uuid;
  std::string product;
  uint64_t memory_bytes = 0;
  std::string compute_capability;  // "8.0"; "" unknown
  std::string driver_version;      // "550.54.15"; "" unknown

  bool operator==(const SliceGpu&) const = default;
};

// A version attribute's semver spelling of "8.0" or "535.104.05": three
// numeric parts, leading zeros dropped ("8.0.0", "535.104.5"); "" if `text`
// is not 1-3 dot-separated numbers.
std::string SemverOf(const std::string& text);

// The slice's name and its spec for `gpu`.
std::string SliceName(const std::string& node, const SliceGpu& gpu);
nlohmann::json SliceSpec(const std::string& node, const SliceGpu& gpu, int64_t generation,
                         int64_t slice_count);

// The whole ResourceSlice object for `gpu`; `owner` (an ownerReference) may be null.
nlohmann::json ResourceSliceObject(const std::string& node, const SliceGpu& gpu, int64_t generation,
                                   int64_t slice_count, const nlohmann::json& owner);

class SlicePublisher {
 public:
  // REQUIRES: `client` outlives the publisher.
  SlicePublisher(KubeClient& client, std::string node);

  Status Publish(const std::vector<SliceGpu>& gpus);

  uint64_t writes() const { return writes_; }  // POST/PUT/DELETE sent so far

 private:
  std::optional<nlohmann::json> Owner();
  Status Write(const std::string& name, nlohmann::json slice,
               const std::optional<nlohmann::json>& existing);

  KubeClient& client_;
  const std::string node_;
  std::optional<nlohmann::json> owner_;  // the Node's ownerReference, once read
  uint64_t writes_ = 0;
};

}  // namespace gpuslice::daemon::kube
