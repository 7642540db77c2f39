#include "daemon/kubelet/kubelet_side.h"

#include <unistd.h>

#include <filesystem>
#include <set>

#include "common/log.h"
#include "daemon/kubelet/device_plugin.h"
#include "daemon/kubelet/kubelet_paths.h"
#include "shm/segment_dirs.h"

namespace gpuslice::daemon::kubelet {

namespace {

// Until the API-server client is wired: every read says why it cannot be done.
class NoClaimReader final : public ClaimReader {
 public:
  StatusOr<ClaimInfo> Read(const ClaimRef& ref) override {
    return Unavailable("claim " + ref.claim_namespace + "/" + ref.name +
                       ": no source of ResourceClaims (start gpusliced with --dra-claims-dir "
                       "or with the API server client)");
  }
};

}  // namespace

std::vector<DeviceHealthReport> GpuHealth(const Snapshot& snapshot, int64_t now_unix_s) {
  std::vector<DeviceHealthReport> out;
  for (size_t i = 0; i < snapshot.gpus.size(); ++i) {
    const GpuInfo& gpu = snapshot.gpus[i];
    DeviceHealthReport r;
    r.device = "gpu" + std::to_string(gpu.index);
    r.updated_unix_s = now_unix_s;
    const GpuReadState read = i < snapshot.reads.size() ? snapshot.reads[i] : GpuReadState{};
    if (read.read_ns == 0) {
      r.state = DeviceHealthReport::State::kUnknown;
    } else if (gpu.critical_xid != 0) {
      r.state = DeviceHealthReport::State::kUnhealthy;
      r.why = "critical XID " + std::to_string(gpu.critical_xid) + " on GPU " + gpu.uuid +
              " (unhealthy until the daemon restarts)";
    } else if (read.failed) {
      r.state = DeviceHealthReport::State::kUnhealthy;
      r.why = "NVML cannot read GPU " + gpu.uuid + " (lost?)";
    } else {
      r.state = DeviceHealthReport::State::kHealthy;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string NodeName(const std::string& kube_node) {
  if (!kube_node.empty()) return kube_node;
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

KubeletConfig KubeletConfigOf(const DaemonConfig& config) {
  return KubeletConfig{
      .kubelet_dir = config.kubelet_dir,
      .dra = config.dra,
      .device_plugin = config.device_plugin,
      .cdi_dir = config.cdi_dir,
      .claims_dir = config.dra_claims_dir,
      .limiter_library = config.limiter_library,
      .ld_so_preload = config.ld_so_preload,
      .device_plugin_slices = static_cast<uint32_t>(config.vgpu_per_gpu),
      .memory_unit_mib = static_cast<uint32_t>(config.gpu_memory_unit_mib),
  };
}

StatusOr<std::unique_ptr<KubeletSide>> KubeletSide::Start(const KubeletConfig& config,
                                                          Context context) {
  std::unique_ptr<KubeletSide> side(new KubeletSide());
  side->shm_dir_ = context.shm_dir;
  side->registry_ = &context.registry;
  side->sink_ = std::make_unique<RegistryLimitSink>(context.registry);
  side->store_ = std::make_unique<AllocationStore>(context.state, *side->sink_);
  if (Status s = side->store_->Restore(); !s.ok()) {
    GS_LOG(kError, "kubelet", "event=allocations_restore_failed error=\"%s\"", s.message().c_str());
  }
  CdiOptions cdi;
  cdi.dir = config.cdi_dir;
  cdi.library = config.limiter_library;
  cdi.ld_so_preload = config.ld_so_preload;
  cdi.daemon_socket = context.daemon_socket;
  cdi.shm_dir = context.shm_dir;
  if (config.dra) {
    ClaimReader* reader = context.claim_reader;
    if (reader == nullptr) {
      if (config.claims_dir.empty()) {
        side->owned_reader_ = std::make_unique<NoClaimReader>();
      } else {
        side->owned_reader_ = std::make_unique<FileClaimReader>(config.claims_dir);
      }
      reader = side->owned_reader_.get();
    }
    DraPluginOptions options;
    options.plugin_socket = DraPluginSocket(config.kubelet_dir);
    options.registration_socket = DraRegistrationSocket(config.kubelet_dir);
    options.cdi = cdi;
    options.mps_acquire = context.mps_acquire;
    options.mps_release = context.mps_release;
    options.health = context.health;
    options.pool = context.pool;
    side->dra_ = std::make_unique<DraPlugin>(options, *reader, *side->store_, context.node_gpus);
    GS_RETURN_IF_ERROR(side->dra_->Start());
  }
  if (config.device_plugin) {
    // Its own record: an allocation's limits are set on its container's
    // slice group once PodResources joins them (device_plugin.h).
    side->no_sink_ = std::make_unique<NoLimitSink>();
    side->dp_store_ =
        std::make_unique<AllocationStore>(context.state, *side->no_sink_, "kube_device_plugin");
    if (Status s = side->dp_store_->Restore(); !s.ok()) {
      GS_LOG(kError, "kubelet", "event=allocations_restore_failed error=\"%s\"",
             s.message().c_str());
    }
    DevicePluginOptions options;
    options.dir = DevicePluginDir(config.kubelet_dir);
    options.pod_resources_socket = PodResourcesSocket(config.kubelet_dir);
    options.vgpu_per_gpu = config.device_plugin_slices;
    options.memory_unit_mib = config.memory_unit_mib;
    options.inject = cdi;
    options.limits = side->sink_.get();  // slices' limits: the daemon's word
    options.mps_acquire = context.mps_acquire;
    options.mps_release = context.mps_release;
    side->device_plugins_ = std::make_unique<DevicePlugins>(
        options, *side->dp_store_,
        [node_gpus = context.node_gpus, memory = context.memory, health = context.health] {
          // A GPU the DRA health service calls Unhealthy (lost, or a
          // critical XID) is Unhealthy in ListAndWatch too.
          std::set<std::string> unhealthy;
          if (health) {
            for (const DeviceHealthReport& r : health()) {
              if (r.state == DeviceHealthReport::State::kUnhealthy) unhealthy.insert(r.device);
            }
          }
          std::vector<GpuOffer> offers;
          for (const NodeGpu& g : node_gpus()) {
            offers.push_back(GpuOffer{g.index, g.uuid, memory ? memory(g.uuid) : 0,
                                      !unhealthy.contains("gpu" + std::to_string(g.index))});
          }
          return offers;
        });
    GS_RETURN_IF_ERROR(side->device_plugins_->Start());
  }
  return side;
}

KubeletSide::~KubeletSide() { Stop(); }

void KubeletSide::Stop() {
  if (dra_) dra_->Stop();
  if (device_plugins_) device_plugins_->Stop();
}

void KubeletSide::SweepClaimDirs() {
  if (shm_dir_.empty()) return;
  const std::string claims = shm_dir_ + "/" + kClaimDirsName;
  std::vector<std::string> groups;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(claims, ec)) {
    if (entry.is_directory(ec) && !entry.is_symlink(ec)) {
      groups.push_back(entry.path().filename().string());
    }
  }
  for (const std::string& group : groups) {
    // A group still known has members (or is set again): not yet.
    if (registry_->GroupOf(group).has_value()) continue;
    // Device-plugin allocations are named dp-…, claims by their UID.
    AllocationStore* owner =
        group.starts_with("dp-") && dp_store_ != nullptr ? dp_store_.get() : store_.get();
    Status removed;
    if (!owner->IfUnrecorded(group, [&] { removed = RemoveClaimSegmentDir(shm_dir_, group); })) {
      continue;
    }
    if (removed.ok()) {
      GS_LOG(kInfo, "kubelet", "event=claim_segment_dir_removed group=%s", group.c_str());
    }  // else a segment still in use: the next sweep tries again
  }
}

Status KubeletSide::RetryCheckpoint() {
  Status first = store_ != nullptr ? store_->RetryCheckpoint() : Status::Ok();
  if (dp_store_ != nullptr) {
    if (Status s = dp_store_->RetryCheckpoint(); first.ok()) first = s;
  }
  return first;
}

}  // namespace gpuslice::daemon::kubelet
