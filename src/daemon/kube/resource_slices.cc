#include "daemon/kube/resource_slices.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "common/log.h"
#include "daemon/kube/reflector.h"

namespace gpuslice::daemon::kube {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string SlicesPath() { return std::string(kResourceApi) + "/resourceslices"; }

// Drops the fields the server owns, to compare what we publish.
nlohmann::json Comparable(nlohmann::json spec) {
  if (spec.contains("pool") && spec["pool"].is_object()) spec["pool"].erase("generation");
  return spec;
}

}  // namespace

std::string SemverOf(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty() || p.size() > 9 || !std::all_of(p.begin(), p.end(), ::isdigit)) return "";
    parts.push_back(std::to_string(std::stoul(p)));
  }
  if (parts.empty() || parts.size() > 3 || text.ends_with('.')) return "";
  while (parts.size() < 3) parts.emplace_back("0");
  return parts[0] + "." + parts[1] + "." + parts[2];
}

std::string SliceName(const std::string& node, const SliceGpu& gpu) {
  return node + "-gpuslice-gpu" + std::to_string(gpu.index);
}

nlohmann::json SliceSpec(const std::string& node, const SliceGpu& gpu, int64_t generation,
                         int64_t slice_count) {
  const uint64_t memory_max = std::max(kMiB, gpu.memory_bytes / kMiB * kMiB);
  nlohmann::json attributes = {{"uuid", {{"string", gpu.uuid}}},
                               {"productName", {{"string", gpu.product}}},
                               {"memory", {{"int", gpu.memory_bytes}}}};
  if (std::string v = SemverOf(gpu.compute_capability); !v.empty()) {
    attributes["computeCapability"] = {{"version", v}};
  }
  if (std::string v = SemverOf(gpu.driver_version); !v.empty()) {
    attributes["driverVersion"] = {{"version", v}};
  }
  nlohmann::json device = {
      {"name", "gpu" + std::to_string(gpu.index)},
      {"allowMultipleAllocations", true},
      {"attributes", attributes},
      {"capacity",
       {{"memory",
         {{"value", std::to_string(gpu.memory_bytes)},
          {"requestPolicy",
           {{"default", std::to_string(memory_max)},
            {"validRange",
             {{"min", "1Mi"}, {"max", std::to_string(memory_max)}, {"step", "1Mi"}}}}}}},
        {"cores",
         {{"value", "100"},
          {"requestPolicy",
           {{"default", "100"},
            {"validRange", {{"min", "1"}, {"max", "100"}, {"step", "1"}}}}}}}}}};
  return {
      {"driver", kDriverName},
      {"nodeName", node},
      {"pool", {{"name", node}, {"generation", generation}, {"resourceSliceCount", slice_count}}},
      {"devices", nlohmann::json::array({device})}};
}

nlohmann::json ResourceSliceObject(const std::string& node, const SliceGpu& gpu, int64_t generation,
                                   int64_t slice_count, const nlohmann::json& owner) {
  nlohmann::json slice = {{"apiVersion", "resource.k8s.io/v1"},
                          {"kind", "ResourceSlice"},
                          {"metadata",
                           {{"name", SliceName(node, gpu)},
                            {"labels", {{"app.kubernetes.io/managed-by", "gpusliced"}}}}},
                          {"spec", SliceSpec(node, gpu, generation, slice_count)}};
  if (!owner.is_null()) slice["metadata"]["ownerReferences"] = nlohmann::json::array({owner});
  return slice;
}

SlicePublisher::SlicePublisher(KubeClient& client, std::string node)
    : client_(client), node_(std::move(node)) {}

std::optional<nlohmann::json> SlicePublisher::Owner() {
  if (owner_) return owner_;
  auto n = client_.Get("/api/v1/nodes/" + node_);
  if (!n.ok()) {
    GS_LOG(kWarn, "kube", "event=node_unreadable node=%s error=\"%s\" (slices get no owner)",
           node_.c_str(), n.status().message().c_str());
    return std::nullopt;
  }
  std::string uid = (*n)["metadata"].value("uid", "");
  if (uid.empty()) return std::nullopt;
  owner_ = nlohmann::json{
      {"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_}, {"uid", uid}, {"controller", true}};
  return owner_;
}

Status SlicePublisher::Write(const std::string& name, nlohmann::json slice,
                             const std::optional<nlohmann::json>& existing) {
  const std::string path = SlicesPath() + "/" + name;
  std::optional<nlohmann::json> current = existing;
  for (int attempt = 0; attempt < 2; ++attempt) {
    ++writes_;
    if (!current) {
      auto r = client_.Post(SlicesPath(), slice);
      if (r.ok()) return Status::Ok();
      if (r.status().code() != StatusCode::kAlreadyExists) return r.status();
    } else {
      slice["metadata"]["resourceVersion"] = (*current)["metadata"].value("resourceVersion", "");
      auto r = client_.Put(path, slice);
      if (r.ok()) return Status::Ok();
      if (r.status().code() != StatusCode::kAlreadyExists &&
          r.status().code() != StatusCode::kNotFound) {
        return r.status();
      }
    }
    // Someone else changed it: read it again and retry once.
    auto now = client_.Get(path);
    if (now.ok()) {
      current = *now;
    } else if (now.status().code() == StatusCode::kNotFound) {
      current.reset();
    } else {
      return now.status();
    }
  }
  return Unavailable("ResourceSlice " + name + " kept changing under us");
}

Status SlicePublisher::Publish(const std::vector<SliceGpu>& gpus) {
  auto list = client_.Get(SlicesPath() + "?fieldSelector=" +
                          UrlEncode("spec.nodeName=" + node_ + ",spec.driver=" + kDriverName));
  if (!list.ok()) return list.status().WithContext("listing the node's ResourceSlices");
  std::map<std::string, nlohmann::json> existing;
  int64_t generation = 0;
  for (const nlohmann::json& item : (*list)["items"]) {
    const nlohmann::json& spec = item["spec"];
    if (spec.value("nodeName", "") != node_ || spec.value("driver", "") != kDriverName) continue;
    existing[item["metadata"].value("name", "")] = item;
    if (spec.contains("pool") && spec["pool"].contains("generation")) {
      generation = std::max(generation, spec["pool"]["generation"].get<int64_t>());
    }
  }
  const auto count = static_cast<int64_t>(gpus.size());
  bool same = existing.size() == gpus.size();
  for (const SliceGpu& gpu : gpus) {
    auto it = existing.find(SliceName(node_, gpu));
    same = same && it != existing.end() &&
           Comparable(it->second["spec"]) == Comparable(SliceSpec(node_, gpu, 0, count));
  }
  if (same) return Status::Ok();

  ++generation;
  std::optional<nlohmann::json> owner = Owner();
  for (const SliceGpu& gpu : gpus) {
    const std::string name = SliceName(node_, gpu);
    nlohmann::json slice =
        ResourceSliceObject(node_, gpu, generation, count, owner ? *owner : nlohmann::json());
    auto it = existing.find(name);
    GS_RETURN_IF_ERROR(
        Write(name, std::move(slice),
              it == existing.end() ? std::nullopt : std::optional<nlohmann::json>(it->second))
            .WithContext("publishing ResourceSlice " + name));
    if (it != existing.end()) existing.erase(it);
  }
  for (const auto& [name, slice] : existing) {
    ++writes_;
    Status s = client_.Delete(SlicesPath() + "/" + name);
    if (!s.ok() && s.code() != StatusCode::kNotFound) {
      return s.WithContext("deleting the stale ResourceSlice " + name);
    }
  }
  GS_LOG(kInfo, "kube", "event=resource_slices_published node=%s gpus=%zu generation=%lld",
         node_.c_str(), gpus.size(),
         static_cast<long long>(generation));  // NOLINT(google-runtime-int)
  return Status::Ok();
}

}  // namespace gpuslice::daemon::kube
