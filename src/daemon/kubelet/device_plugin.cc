#include "daemon/kubelet/device_plugin.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "common/log.h"
#include "kubelet_proto/podresources_v1.grpc.pb.h"
#include "shm/segment_dirs.h"

namespace gpuslice::daemon::kubelet {

using nlohmann::json;

namespace {

constexpr DpResource kResources[] = {DpResource::kVgpu, DpResource::kMemory, DpResource::kCores};

char Letter(DpResource r) {
  switch (r) {
    case DpResource::kVgpu:
      return 'v';
    case DpResource::kMemory:
      return 'm';
    case DpResource::kCores:
      return 'c';
  }
  return '?';
}

const char* Short(DpResource r) {
  switch (r) {
    case DpResource::kVgpu:
      return "vgpu";
    case DpResource::kMemory:
      return "gpu-memory";
    case DpResource::kCores:
      return "gpu-cores";
  }
  return "";
}

// FNV-1a of the sorted ids: the same container's ids give the same name.
std::string AllocationIdOf(DpResource r, std::vector<std::string> ids) {
  std::sort(ids.begin(), ids.end());
  uint64_t h = 1469598103934665603ull;
  for (const std::string& id : ids) {
    for (char c : id) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ull;
    }
    h ^= 0xff;
    h *= 1099511628211ull;
  }
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, h);
  return std::string("dp-") + Short(r) + "-" + hex;
}

}  // namespace

std::string ResourceName(DpResource r) { return std::string(kDriverName) + "/" + Short(r); }

std::string DpDeviceId(DpResource r, const std::string& uuid, uint64_t n) {
  return uuid + "-" + Letter(r) + std::to_string(n);
}

StatusOr<ParsedDeviceId> ParseDpDeviceId(const std::string& id) {
  const size_t dash = id.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 2 > id.size()) {
    return InvalidArgument("device id \"" + id + "\" is not gpuslice's");
  }
  ParsedDeviceId p{};
  switch (id[dash + 1]) {
    case 'v':
      p.resource = DpResource::kVgpu;
      break;
    case 'm':
      p.resource = DpResource::kMemory;
      break;
    case 'c':
      p.resource = DpResource::kCores;
      break;
    default:
      return InvalidArgument("device id \"" + id + "\" is not gpuslice's");
  }
  const std::string digits = id.substr(dash + 2);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit) ||
      digits.size() > 12) {
    return InvalidArgument("device id \"" + id + "\" is not gpuslice's");
  }
  p.uuid = id.substr(0, dash);
  p.n = std::stoull(digits);
  return p;
}

class DevicePlugins::Service final : public v1beta1::DevicePlugin::Service {
 public:
  Service(DevicePlugins& plugins, DpResource r) : plugins_(plugins), resource_(r) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext* /*context*/,
                                      const v1beta1::Empty* /*request*/,
                                      v1beta1::DevicePluginOptions* options) override {
    options->set_pre_start_required(true);  // PrepareContainer; no GetPreferredAllocation
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty* /*request*/,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    v1beta1::ListAndWatchResponse sent = plugins_.DeviceList(resource_);
    if (!writer->Write(sent)) return grpc::Status::OK;
    // The stream stays open until the kubelet goes or the plugins stop; the
    // list is sent again when a GPU's health changes.
    for (;;) {
      {
        MutexLock lock(plugins_.mu_);
        plugins_.cv_.wait_for(lock, std::chrono::milliseconds(200));
        if (plugins_.stopping_ || context->IsCancelled()) break;
      }
      v1beta1::ListAndWatchResponse now = plugins_.DeviceList(resource_);
      if (now.SerializeAsString() == sent.SerializeAsString()) continue;
      if (!writer->Write(now)) break;
      sent = std::move(now);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext* /*context*/,
                                      const v1beta1::PreferredAllocationRequest* /*request*/,
                                      v1beta1::PreferredAllocationResponse* /*response*/) override {
    return {grpc::StatusCode::UNIMPLEMENTED, "no preferred allocation"};
  }

  grpc::Status Allocate(grpc::ServerContext* /*context*/, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    for (const auto& container : request->container_requests()) {
      std::vector<std::string> ids(container.devices_ids().begin(), container.devices_ids().end());
      auto r = plugins_.AllocateContainer(resource_, ids);
      if (!r.ok()) return {grpc::StatusCode::INVALID_ARGUMENT, r.status().ToString()};
      *response->add_container_responses() = std::move(*r);
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext* /*context*/,
                                 const v1beta1::PreStartContainerRequest* request,
                                 v1beta1::PreStartContainerResponse* /*response*/) override {
    std::vector<std::string> ids(request->devices_ids().begin(), request->devices_ids().end());
    const Status s = plugins_.PrepareContainer(resource_, ids);
    if (s.ok()) return grpc::Status::OK;
    GS_LOG(kWarn, "kubelet", "event=device_plugin_start_refused resource=%s error=\"%s\"",
           ResourceName(resource_).c_str(), s.message().c_str());
    return {s.code() == StatusCode::kUnavailable ? grpc::StatusCode::UNAVAILABLE
                                                 : grpc::StatusCode::FAILED_PRECONDITION,
            s.message()};
  }

 private:
  DevicePlugins& plugins_;
  DpResource resource_;
};

DevicePlugins::DevicePlugins(DevicePluginOptions options, AllocationStore& store, Gpus gpus)
    : options_(std::move(options)), store_(store), gpus_(std::move(gpus)) {
  if (options_.memory_unit_mib == 0) options_.memory_unit_mib = 1;
}

DevicePlugins::~DevicePlugins() { Stop(); }

std::string DevicePlugins::SocketOf(DpResource r) const {
  return options_.dir + "/gpuslice-" + Short(r) + ".sock";
}

std::vector<std::string> DevicePlugins::Devices(DpResource r) const {
  std::vector<std::string> ids;
  for (const GpuOffer& g : gpus_()) {
    for (std::string& id : Devices(r, g)) ids.push_back(std::move(id));
  }
  return ids;
}

std::vector<std::string> DevicePlugins::Devices(DpResource r, const GpuOffer& g) const {
  std::vector<std::string> ids;
  {
    uint64_t count = 0;
    switch (r) {
      case DpResource::kVgpu:
        count = options_.vgpu_per_gpu;
        break;
      case DpResource::kMemory:
        count = g.memory_bytes / (uint64_t{options_.memory_unit_mib} << 20);
        break;
      case DpResource::kCores:
        count = 100;
        break;
    }
    for (uint64_t n = 0; n < count; ++n) ids.push_back(DpDeviceId(r, g.uuid, n));
  }
  return ids;
}

v1beta1::ListAndWatchResponse DevicePlugins::DeviceList(DpResource r) const {
  v1beta1::ListAndWatchResponse list;
  for (const GpuOffer& g : gpus_()) {
    for (const std::string& id : Devices(r, g)) {
      auto* d = list.add_devices();
      d->set_id(id);
      d->set_health(g.healthy ? "Healthy" : "Unhealthy");
    }
  }
  return list;
}

StatusOr<v1beta1::ContainerAllocateResponse> DevicePlugins::AllocateContainer(
    DpResource r, const std::vector<std::string>& ids) {
  if (ids.empty()) return InvalidArgument("no device ids");
  std::map<std::string, uint32_t> index;
  for (const GpuOffer& g : gpus_()) index[g.uuid] = g.index;
  std::map<std::string, uint64_t> units;  // by GPU UUID
  for (const std::string& id : ids) {
    GS_ASSIGN_OR_RETURN(ParsedDeviceId p, ParseDpDeviceId(id));
    if (p.resource != r) {
      return InvalidArgument("device id \"" + id + "\" is not of " + ResourceName(r));
    }
    if (index.count(p.uuid) == 0) return NotFound("device id \"" + id + "\": no such GPU here");
    ++units[p.uuid];
  }
  Allocation a;
  a.claim_uid = AllocationIdOf(r, ids);
  a.source = "device-plugin";
  for (const auto& [uuid, n] : units) {
    DeviceShare d;
    d.uuid = uuid;
    d.device = ResourceName(r);
    if (r == DpResource::kMemory) d.memory_bytes = n * (uint64_t{options_.memory_unit_mib} << 20);
    if (r == DpResource::kCores)
      d.cores_percent = static_cast<uint32_t>(std::min<uint64_t>(n, 100));
    a.devices.push_back(std::move(d));
  }
  const bool known = store_.Get(a.claim_uid).has_value();
  GS_ASSIGN_OR_RETURN(Allocation recorded, store_.Prepare(a));
  // A slice's group has a segment directory of its own (shm/segment_dirs.h),
  // made once the allocation is recorded (KubeletSide::SweepClaimDirs
  // removes those of unrecorded groups).
  if (r == DpResource::kVgpu) {
    if (Status s = MakeClaimSegmentDir(options_.inject.shm_dir, a.claim_uid); !s.ok()) {
      if (!known) (void)store_.Unprepare(a.claim_uid);
      return s;
    }
  }

  const json spec = CdiSpecFor(recorded, options_.inject, index);
  v1beta1::ContainerAllocateResponse out;
  if (r != DpResource::kVgpu) {
    // An amount of the container's slice: only its limit, the bootstrap
    // fallback until the daemon joins it to the slice's group (Reconcile).
    for (const auto& [name, value] : CdiEnv(spec)) {
      if (name == "GPUSLICE_MEMORY_LIMIT" || name == "GPUSLICE_COMPUTE_LIMIT") {
        (*out.mutable_envs())[name] = value;
      }
    }
  } else {
    // The slice: the DRA plugin's injection, its group and its own directory.
    for (const auto& [name, value] : CdiEnv(spec)) (*out.mutable_envs())[name] = value;
    const json edits = spec["devices"][0]["containerEdits"];
    for (const json& m : edits.value("mounts", json::array())) {
      auto* mount = out.add_mounts();
      mount->set_host_path(m.value("hostPath", ""));
      mount->set_container_path(m.value("containerPath", ""));
      const json options = m.value("options", json::array());
      mount->set_read_only(std::find(options.begin(), options.end(), "ro") != options.end());
    }
    for (const json& n : edits.value("deviceNodes", json::array())) {
      auto* d = out.add_devices();
      d->set_host_path(n.value("hostPath", ""));
      d->set_container_path(n.value("path", ""));
      d->set_permissions("rw");
    }
    if (options_.mps_acquire) {
      // The MPS client: empty until PrepareContainer knows the pod's tier
      // (a spec PrepareContainer wrote stays: the kubelet may allocate again).
      const std::string path = CdiMpsSpecPath(options_.inject.dir, recorded.claim_uid);
      if (access(path.c_str(), F_OK) != 0) {
        if (Status s = WriteCdiFile(path, CdiMpsSpecFor(recorded.claim_uid, {}, {})); !s.ok()) {
          if (!known) (void)store_.Unprepare(a.claim_uid);
          return s;
        }
      }
      out.add_cdi_devices()->set_name(CdiMpsDeviceId(recorded.claim_uid));
    }
  }
  (*out.mutable_annotations())["gpuslice.io/allocation"] = recorded.claim_uid;
  GS_LOG(kInfo, "kubelet", "event=device_plugin_allocated resource=%s allocation=%s devices=%zu",
         ResourceName(r).c_str(), recorded.claim_uid.c_str(), ids.size());
  return out;
}

Status DevicePlugins::Release(const std::string& id) {
  // A removal whose save failed stands (the store saves it later): the rest
  // of the release goes on, and the error is still answered.
  Status removed = store_.Unprepare(id);
  if (!removed.ok() && store_.Get(id).has_value()) return removed;
  if (!id.starts_with(std::string("dp-") + Short(DpResource::kVgpu) + "-")) return removed;
  if (options_.limits != nullptr) GS_RETURN_IF_ERROR(options_.limits->ClearLimits(id));
  {
    MutexLock lock(mu_);
    applied_.erase(id);
    containers_.erase(id);
  }
  if (options_.mps_acquire) {
    if (Status s = RemoveCdiFile(CdiMpsSpecPath(options_.inject.dir, id)); !s.ok()) {
      GS_LOG(kWarn, "kubelet", "event=mps_spec_kept group=%s error=\"%s\"", id.c_str(),
             s.message().c_str());
    }
    if (options_.mps_release) options_.mps_release(id);
  }
  if (Status s = RemoveClaimSegmentDir(options_.inject.shm_dir, id); !s.ok()) {
    GS_LOG(kWarn, "kubelet", "event=slice_segments_kept group=%s error=\"%s\"", id.c_str(),
           s.message().c_str());
  }
  return removed;
}

bool DevicePlugins::HasUnjoinedSlice() const {
  for (const Allocation& a : store_.All()) {
    if (a.source != "device-plugin" || !a.claim_uid.starts_with("dp-vgpu-")) continue;
    MutexLock lock(mu_);
    if (!applied_.contains(a.claim_uid)) return true;
  }
  return false;
}

Status DevicePlugins::Reconcile() { return Check(/*release=*/true); }

Status DevicePlugins::Check(bool release) {
  MutexLock check(check_mu_);
  return CheckLocked(release, std::chrono::seconds(10));
}

TenantRegistry::GroupChange DevicePlugins::ContainerSettings(
    const Limits& amounts, const std::set<std::string>& gpus,
    const std::optional<TenantRegistry::GroupChange>& pod) {
  TenantRegistry::GroupChange change;
  Limits limits = amounts;
  ScheduleSettings schedule;
  if (pod) {
    std::optional<GpuLimit> annotated;
    if (pod->limits) {
      if (auto it = pod->limits->find(kAllGpus); it != pod->limits->end()) annotated = it->second;
    }
    std::optional<ScheduleEntry> entry;
    if (pod->schedule) {
      if (auto it = pod->schedule->find(kAllGpus); it != pod->schedule->end()) entry = it->second;
    }
    for (const std::string& uuid : gpus) {
      if (annotated && (annotated->memory_bytes || annotated->compute_percent)) {
        GpuLimit& to = limits[uuid];
        if (annotated->memory_bytes) {
          to.memory_bytes = to.memory_bytes ? std::min(*to.memory_bytes, *annotated->memory_bytes)
                                            : *annotated->memory_bytes;
        }
        if (annotated->compute_percent) {
          to.compute_percent = to.compute_percent
                                   ? std::min(*to.compute_percent, *annotated->compute_percent)
                                   : *annotated->compute_percent;
        }
      }
      if (entry) schedule[uuid] = *entry;
    }
    change.tier = pod->tier.value_or(Tier::kShared);
  } else {
    change.tier = Tier::kShared;
  }
  change.limits = std::move(limits);
  change.schedule = std::move(schedule);
  return change;
}

namespace {

bool SameChange(const TenantRegistry::GroupChange& a, const TenantRegistry::GroupChange& b) {
  return a.limits == b.limits && a.schedule == b.schedule && a.tier == b.tier;
}

}  // namespace

Status DevicePlugins::ApplyLocked() {
  if (options_.limits == nullptr) return Status::Ok();
  std::vector<std::pair<std::string, TenantRegistry::GroupChange>> todo;
  {
    MutexLock lock(mu_);
    for (const auto& [group, c] : containers_) {
      std::optional<TenantRegistry::GroupChange> pod;
      if (auto it = pod_settings_.find(c.pod); it != pod_settings_.end()) pod = it->second;
      TenantRegistry::GroupChange change = ContainerSettings(c.amounts, c.gpus, pod);
      if (auto it = applied_.find(group); it != applied_.end() && SameChange(it->second, change)) {
        continue;
      }
      todo.emplace_back(group, std::move(change));
    }
  }
  Status first;
  // The daemon's word on each slice's settings, whatever the container's
  // environment says (a tenant's registration can only lower its limits).
  for (auto& [group, change] : todo) {
    if (Status set = options_.limits->SetSettings(group, change); !set.ok()) {
      GS_LOG(kWarn, "kubelet", "event=device_plugin_settings_refused group=%s error=\"%s\"",
             group.c_str(), set.message().c_str());
      first = first.ok() ? set : first;
      continue;
    }
    GS_LOG(kInfo, "kubelet", "event=device_plugin_limits_set group=%s gpus=%zu", group.c_str(),
           change.limits->size());
    MutexLock lock(mu_);
    applied_[group] = std::move(change);
  }
  return first;
}

void DevicePlugins::SetPodSettings(const std::string& pod,
                                   std::optional<TenantRegistry::GroupChange> change) {
  MutexLock check(check_mu_);
  {
    MutexLock lock(mu_);
    if (change) {
      pod_settings_[pod] = std::move(*change);
    } else {
      pod_settings_.erase(pod);
    }
  }
  (void)ApplyLocked();  // refusals are logged
}

Status DevicePlugins::PrepareContainer(DpResource r, const std::vector<std::string>& ids) {
  if (ids.empty()) return FailedPrecondition("no device ids");
  const std::string id = AllocationIdOf(r, ids);
  if (!store_.Get(id)) {
    return FailedPrecondition("devices of " + ResourceName(r) + " (" + id +
                              ") were not allocated by this daemon");
  }
  MutexLock check(check_mu_);
  // One bounded look (the kubelet retries a failed start with backoff).
  Status checked = CheckLocked(/*release=*/false, options_.pre_start_timeout);
  std::string slice;
  Tier tier = Tier::kShared;
  std::set<std::string> gpus;
  {
    MutexLock lock(mu_);
    GS_RETURN_IF_ERROR(PreparedSliceLocked(r, id, checked, slice));
    if (auto it = applied_.find(slice); it != applied_.end()) {
      tier = it->second.tier.value_or(Tier::kShared);
    }
    gpus = containers_.at(slice).gpus;
  }
  // The slice's own PreStartContainer gives its container the MPS client
  // the pod's tier asks for (not under mu_: an MPS start takes seconds).
  if (r != DpResource::kVgpu || !options_.mps_acquire) return Status::Ok();
  return WriteMpsSpec(slice, tier, gpus);
}

Status DevicePlugins::WriteMpsSpec(const std::string& group, Tier tier,
                                   const std::set<std::string>& gpus) {
  const std::string path = CdiMpsSpecPath(options_.inject.dir, group);
  if (tier != Tier::kMps) {
    // Shared (or an annotation taken away): no MPS client, nothing held.
    GS_RETURN_IF_ERROR(WriteCdiFile(path, CdiMpsSpecFor(group, {}, {})));
    if (options_.mps_release) options_.mps_release(group);
    return Status::Ok();
  }
  const DevicePluginOptions::MpsGrant grant =
      options_.mps_acquire(group, std::vector<std::string>(gpus.begin(), gpus.end()));
  if (grant.tier != Tier::kMps) {
    GS_LOG(kWarn, "kubelet", "event=device_plugin_mps_fallback group=%s reason=\"%s\"",
           group.c_str(), grant.reason.c_str());
    return WriteCdiFile(path, CdiMpsSpecFor(group, {}, {}));
  }
  const std::vector<std::string> dirs = MpsDirs(grant.env);
  GS_RETURN_IF_ERROR(WriteCdiFile(path, CdiMpsSpecFor(group, grant.env, dirs)));
  GS_LOG(kInfo, "kubelet", "event=device_plugin_mps group=%s pipe=%s", group.c_str(),
         dirs.empty() ? "" : dirs.front().c_str());
  return Status::Ok();
}

Status DevicePlugins::PreparedSliceLocked(DpResource r, const std::string& id,
                                          const Status& checked, std::string& slice) {
  if (auto it = sliceless_.find(id); it != sliceless_.end()) {
    return FailedPrecondition(ResourceName(r) + " in pod " + it->second +
                              " needs gpuslice.io/vgpu in the same container: the amounts are of "
                              "a slice, and the slice is what runs the limiter");
  }
  for (const auto& [group, c] : containers_) {
    if (group == id ||
        std::find(c.amount_ids.begin(), c.amount_ids.end(), id) != c.amount_ids.end()) {
      slice = group;
    }
  }
  if (slice.empty()) {
    if (!checked.ok()) return checked;
    return FailedPrecondition("the kubelet's PodResources shows no container holding " + id);
  }
  if (options_.limits != nullptr && !applied_.contains(slice)) {
    return checked.ok() ? Unavailable("the settings of " + slice + " could not be set") : checked;
  }
  return Status::Ok();
}

Status DevicePlugins::CheckLocked(bool release, std::chrono::milliseconds timeout) {
  auto stub = v1::PodResourcesLister::NewStub(grpc::CreateChannel(
      "unix://" + options_.pod_resources_socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::ListPodResourcesResponse list;
  grpc::Status s = stub->List(&ctx, v1::ListPodResourcesRequest(), &list);
  if (!s.ok()) {
    return Unavailable("PodResources List on " + options_.pod_resources_socket + ": " +
                       s.error_message());
  }
  std::map<std::string, std::pair<std::string, std::string>> held;  // allocation -> pod
  std::map<std::string, Container> containers;                      // by slice group
  std::map<std::string, std::string> sliceless;
  for (const auto& pod : list.pod_resources()) {
    const std::string pod_name = pod.namespace_() + "/" + pod.name();
    for (const auto& container : pod.containers()) {
      std::string slice;
      std::vector<std::string> amounts;
      for (const auto& devices : container.devices()) {
        for (DpResource r : kResources) {
          if (devices.resource_name() != ResourceName(r)) continue;
          std::vector<std::string> ids(devices.device_ids().begin(), devices.device_ids().end());
          const std::string id = AllocationIdOf(r, ids);
          held[id] = {pod.namespace_(), pod.name()};
          if (r == DpResource::kVgpu) {
            slice = id;
          } else {
            amounts.push_back(id);
          }
        }
      }
      if (slice.empty()) {
        for (const std::string& id : amounts) sliceless[id] = pod_name;
        continue;
      }
      const auto recorded = store_.Get(slice);
      if (!recorded) continue;
      Container c;
      c.pod = pod_name;
      for (const DeviceShare& d : recorded->devices) c.gpus.insert(d.uuid);
      for (const std::string& id : amounts) {
        const auto amount = store_.Get(id);
        if (!amount) continue;
        c.amount_ids.push_back(id);
        for (const auto& [uuid, l] : LimitsOf(*amount)) {
          c.gpus.insert(uuid);
          GpuLimit& to = c.amounts[uuid];
          if (l.memory_bytes) to.memory_bytes = to.memory_bytes.value_or(0) + *l.memory_bytes;
          if (l.compute_percent) {
            to.compute_percent =
                std::min<uint32_t>(100, to.compute_percent.value_or(0) + *l.compute_percent);
          }
        }
      }
      containers[slice] = std::move(c);
    }
  }
  {
    MutexLock lock(mu_);
    containers_ = std::move(containers);
    sliceless_ = std::move(sliceless);
  }
  Status first = ApplyLocked();
  if (!release) return first;
  std::vector<std::string> missing;
  for (const Allocation& a : store_.All()) {
    if (a.source != "device-plugin") continue;
    auto it = held.find(a.claim_uid);
    if (it != held.end()) {
      if (Status o = store_.SetOwner(a.claim_uid, it->second.first, it->second.second); !o.ok()) {
        first = first.ok() ? o : first;
      }
      continue;
    }
    bool seen_missing = false;
    {
      MutexLock lock(mu_);
      seen_missing =
          std::find(missing_once_.begin(), missing_once_.end(), a.claim_uid) != missing_once_.end();
    }
    if (!seen_missing) {
      missing.push_back(a.claim_uid);
      continue;
    }
    // Not under mu_: Release takes it.
    if (Status u = Release(a.claim_uid); !u.ok()) first = first.ok() ? u : first;
  }
  MutexLock lock(mu_);
  missing_once_ = std::move(missing);
  return first;
}

Status DevicePlugins::Serve() {
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  for (DpResource r : kResources) {
    const std::string socket = SocketOf(r);
    unlink(socket.c_str());
    services_.push_back(std::make_unique<Service>(*this, r));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket, grpc::InsecureServerCredentials());
    builder.RegisterService(services_.back().get());
    auto server = builder.BuildAndStart();
    if (!server) return Unavailable("cannot serve the device plugin on " + socket);
    servers_.push_back(std::move(server));
  }
  return Status::Ok();
}

void DevicePlugins::StopServing() {
  {
    MutexLock lock(mu_);
    cv_.notify_all();
  }
  for (auto& server : servers_) {
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server->Wait();
  }
  servers_.clear();
  services_.clear();
  for (DpResource r : kResources) unlink(SocketOf(r).c_str());
}

Status DevicePlugins::RegisterAll() {
  const std::string kubelet = options_.dir + "/kubelet.sock";
  auto stub = v1beta1::Registration::NewStub(
      grpc::CreateChannel("unix://" + kubelet, grpc::InsecureChannelCredentials()));
  for (DpResource r : kResources) {
    v1beta1::RegisterRequest request;
    request.set_version("v1beta1");
    request.set_endpoint(std::filesystem::path(SocketOf(r)).filename().string());
    request.set_resource_name(ResourceName(r));
    request.mutable_options()->set_pre_start_required(true);
    v1beta1::Empty empty;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status s = stub->Register(&ctx, request, &empty);
    if (!s.ok()) {
      return Unavailable("registering " + ResourceName(r) + " with " + kubelet + ": " +
                         s.error_message());
    }
    MutexLock lock(mu_);
    ++registrations_;
  }
  GS_LOG(kInfo, "kubelet", "event=device_plugins_registered kubelet=%s", kubelet.c_str());
  return Status::Ok();
}

uint64_t DevicePlugins::KubeletSocketInode() const {
  struct stat st {};
  if (stat((options_.dir + "/kubelet.sock").c_str(), &st) != 0) return 0;
  return st.st_ino;
}

bool DevicePlugins::OurSocketsPresent() const {
  for (DpResource r : kResources) {
    if (access(SocketOf(r).c_str(), F_OK) != 0) return false;
  }
  return true;
}

void DevicePlugins::Watch() {
  int ticks = 0;
  for (;;) {
    {
      MutexLock lock(mu_);
      if (cv_.wait_for(lock, options_.poll_interval, [&]() REQUIRES(mu_) { return stopping_; })) {
        return;
      }
    }
    const uint64_t inode = KubeletSocketInode();
    if (inode == 0) continue;  // no kubelet now
    const bool ours = OurSocketsPresent();
    uint64_t registered = 0;
    {
      MutexLock lock(mu_);
      registered = registered_inode_;
    }
    if (!ours) {  // a starting kubelet removes every socket of the directory
      StopServing();
      if (Status s = Serve(); !s.ok()) {
        GS_LOG(kError, "kubelet", "event=device_plugin_serve_failed error=\"%s\"",
               s.message().c_str());
        continue;
      }
    }
    if (!ours || inode != registered) {
      if (Status s = RegisterAll(); !s.ok()) {
        GS_LOG(kWarn, "kubelet", "event=device_plugin_register_failed error=\"%s\"",
               s.message().c_str());
        continue;
      }
      MutexLock lock(mu_);
      registered_inode_ = inode;
    }
    // The regular check; a slice whose amounts are not yet the daemon's word
    // is looked for at every poll (without counting it missing).
    const bool regular = options_.reconcile_every > 0 && ++ticks % options_.reconcile_every == 0;
    const bool join =
        options_.reconcile_every > 0 && options_.limits != nullptr && HasUnjoinedSlice();
    if ((regular || join) && access(options_.pod_resources_socket.c_str(), F_OK) == 0) {
      if (Status s = Check(/*release=*/regular); !s.ok()) {
        GS_LOG(kWarn, "kubelet", "event=pod_resources_check_failed error=\"%s\"",
               s.message().c_str());
      }
    }
  }
}

Status DevicePlugins::Start() {
  for (const GpuOffer& g : gpus_()) {
    const uint64_t units = g.memory_bytes / (uint64_t{options_.memory_unit_mib} << 20);
    if (units > 50000) {
      GS_LOG(kWarn, "kubelet",
             "event=device_plugin_large_list gpu=%s gpu_memory_devices=%" PRIu64
             " hint=\"raise the memory unit: the kubelet reads at most 4 MiB per list\"",
             g.uuid.c_str(), units);
    }
  }
  GS_RETURN_IF_ERROR(Serve());
  if (const uint64_t inode = KubeletSocketInode(); inode != 0) {
    if (Status s = RegisterAll(); s.ok()) {
      MutexLock lock(mu_);
      registered_inode_ = inode;
    } else {
      GS_LOG(kWarn, "kubelet", "event=device_plugin_register_failed error=\"%s\"",
             s.message().c_str());
    }
  }
  watcher_ = std::thread([this] { Watch(); });
  return Status::Ok();
}

void DevicePlugins::Stop() {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (watcher_.joinable()) watcher_.join();
  StopServing();
}

int DevicePlugins::registrations() const {
  MutexLock lock(mu_);
  return registrations_;
}

}  // namespace gpuslice::daemon::kubelet
