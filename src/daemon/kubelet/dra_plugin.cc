#include "daemon/kubelet/dra_plugin.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <utility>

#include "common/log.h"
#include "kubelet_proto/dra_health_v1alpha1.grpc.pb.h"
#include "kubelet_proto/dra_v1.grpc.pb.h"
#include "kubelet_proto/dra_v1beta1.grpc.pb.h"
#include "kubelet_proto/pluginregistration_v1.grpc.pb.h"
#include "shm/segment_dirs.h"

namespace gpuslice::daemon::kubelet {

using nlohmann::json;

namespace {

namespace dra_v1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace dra_v1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;

// The DRA service of one API version over the plugin's core: v1 and v1beta1
// carry the same messages under different packages.
template <typename Api>
class DraService final : public Api::DRAPlugin::Service {
 public:
  explicit DraService(DraPlugin& plugin) : plugin_(plugin) {}

  grpc::Status NodePrepareResources(grpc::ServerContext* /*context*/,
                                    const typename Api::NodePrepareResourcesRequest* request,
                                    typename Api::NodePrepareResourcesResponse* response) override {
    for (const auto& c : request->claims()) {
      auto& out = (*response->mutable_claims())[c.uid()];
      auto devices = plugin_.Prepare(ClaimRef{c.namespace_(), c.name(), c.uid()});
      if (!devices.ok()) {
        out.set_error(devices.status().ToString());
        continue;
      }
      for (const PreparedDevice& d : *devices) {
        auto* device = out.add_devices();
        for (const std::string& r : d.request_names) device->add_request_names(r);
        device->set_pool_name(d.pool);
        device->set_device_name(d.device);
        for (const std::string& id : d.cdi_device_ids) device->add_cdi_device_ids(id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(
      grpc::ServerContext* /*context*/, const typename Api::NodeUnprepareResourcesRequest* request,
      typename Api::NodeUnprepareResourcesResponse* response) override {
    for (const auto& c : request->claims()) {
      auto& out = (*response->mutable_claims())[c.uid()];
      if (Status s = plugin_.Unprepare(ClaimRef{c.namespace_(), c.name(), c.uid()}); !s.ok()) {
        out.set_error(s.ToString());
      }
    }
    return grpc::Status::OK;
  }

 private:
  DraPlugin& plugin_;
};

struct V1 {
  using DRAPlugin = dra_v1::DRAPlugin;
  using NodePrepareResourcesRequest = dra_v1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse = dra_v1::NodePrepareResourcesResponse;
  using NodeUnprepareResourcesRequest = dra_v1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse = dra_v1::NodeUnprepareResourcesResponse;
};
struct V1beta1 {
  using DRAPlugin = dra_v1beta1::DRAPlugin;
  using NodePrepareResourcesRequest = dra_v1beta1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse = dra_v1beta1::NodePrepareResourcesResponse;
  using NodeUnprepareResourcesRequest = dra_v1beta1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse = dra_v1beta1::NodeUnprepareResourcesResponse;
};

// "<package's last part>.<service>", as the kubelet expects in supported_versions.
std::string ShortServiceName(const std::string& full) {
  const size_t last = full.rfind('.');
  const size_t before = full.rfind('.', last - 1);
  return full.substr(before + 1);
}

Status PrepareSocket(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Unavailable("cannot replace the socket " + path + ": " + strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

// The registration service, both DRA versions and the health service, owned
// together.
class DraPlugin::Services {
 public:
  class Health final : public v1alpha1::DRAResourceHealth::Service {
   public:
    explicit Health(DraPlugin& plugin) : plugin_(plugin) {}
    grpc::Status NodeWatchResources(
        grpc::ServerContext* context, const v1alpha1::NodeWatchResourcesRequest* /*request*/,
        grpc::ServerWriter<v1alpha1::NodeWatchResourcesResponse>* writer) override {
      const DraPluginOptions& o = plugin_.options();
      std::optional<std::vector<DeviceHealthReport>> sent;
      for (;;) {
        std::vector<DeviceHealthReport> now = o.health();
        // A change of state is news; a newer time alone is not.
        auto states = [](const std::vector<DeviceHealthReport>& r) {
          std::vector<std::pair<std::string, DeviceHealthReport::State>> out;
          out.reserve(r.size());
          for (const auto& d : r) out.emplace_back(d.device, d.state);
          return out;
        };
        if (!sent || states(*sent) != states(now)) {
          v1alpha1::NodeWatchResourcesResponse response;
          for (const DeviceHealthReport& d : now) {
            auto* h = response.add_devices();
            h->mutable_device()->set_pool_name(o.pool);
            h->mutable_device()->set_device_name(d.device);
            h->set_health(d.state == DeviceHealthReport::State::kHealthy     ? v1alpha1::HEALTHY
                          : d.state == DeviceHealthReport::State::kUnhealthy ? v1alpha1::UNHEALTHY
                                                                             : v1alpha1::UNKNOWN);
            h->set_last_updated_time(d.updated_unix_s);
            if (d.state == DeviceHealthReport::State::kUnhealthy) {
              GS_LOG(kWarn, "kubelet", "event=dra_device_unhealthy device=%s why=\"%s\"",
                     d.device.c_str(), d.why.c_str());
            }
          }
          if (!writer->Write(response)) return grpc::Status::OK;  // the kubelet went
          sent = std::move(now);
        }
        MutexLock lock(plugin_.mu_);
        plugin_.stop_cv_.wait_for(lock, o.health_poll,
                                  [this]() REQUIRES(plugin_.mu_) { return plugin_.stopping_; });
        if (plugin_.stopping_ || context->IsCancelled()) return grpc::Status::OK;
      }
    }

   private:
    DraPlugin& plugin_;
  };

  class Registration final : public pluginregistration::Registration::Service {
   public:
    explicit Registration(DraPlugin& plugin) : plugin_(plugin) {}
    grpc::Status GetInfo(grpc::ServerContext* /*context*/,
                         const pluginregistration::InfoRequest* /*request*/,
                         pluginregistration::PluginInfo* info) override {
      info->set_type("DRAPlugin");
      info->set_name(plugin_.options().driver_name);
      info->set_endpoint(plugin_.options().plugin_socket);
      info->add_supported_versions(ShortServiceName(dra_v1::DRAPlugin::service_full_name()));
      info->add_supported_versions(ShortServiceName(dra_v1beta1::DRAPlugin::service_full_name()));
      return grpc::Status::OK;
    }
    grpc::Status NotifyRegistrationStatus(
        grpc::ServerContext* /*context*/, const pluginregistration::RegistrationStatus* status,
        pluginregistration::RegistrationStatusResponse* /*response*/) override {
      {
        MutexLock lock(plugin_.mu_);
        ++plugin_.registration_.notifications;
        plugin_.registration_.registered = status->plugin_registered();
        plugin_.registration_.error = status->error();
      }
      if (status->plugin_registered()) {
        GS_LOG(kInfo, "kubelet", "event=dra_registered driver=%s",
               plugin_.options().driver_name.c_str());
      } else {
        GS_LOG(kError, "kubelet", "event=dra_registration_refused driver=%s error=\"%s\"",
               plugin_.options().driver_name.c_str(), status->error().c_str());
      }
      return grpc::Status::OK;
    }

   private:
    DraPlugin& plugin_;
  };

  explicit Services(DraPlugin& plugin)
      : registration(plugin), v1(plugin), v1beta1(plugin), health(plugin) {}
  Registration registration;
  DraService<V1> v1;
  DraService<V1beta1> v1beta1;
  Health health;
};

DraPlugin::DraPlugin(DraPluginOptions options, ClaimReader& reader, AllocationStore& store,
                     NodeGpus node_gpus)
    : options_(std::move(options)),
      reader_(reader),
      store_(store),
      node_gpus_(std::move(node_gpus)) {}

DraPlugin::~DraPlugin() { Stop(); }

std::map<std::string, uint32_t> DraPlugin::GpuIndex() const {
  std::map<std::string, uint32_t> index;
  for (const NodeGpu& g : node_gpus_()) index[g.uuid] = g.index;
  return index;
}

namespace {

std::vector<PreparedDevice> DevicesOf(const Allocation& a) {
  std::vector<PreparedDevice> out;
  for (const DeviceShare& d : a.devices) {
    PreparedDevice p;
    if (!d.request.empty()) p.request_names.push_back(d.request);
    p.pool = d.pool;
    p.device = d.device;
    p.cdi_device_ids.push_back(CdiDeviceId(a.claim_uid));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

StatusOr<std::vector<PreparedDevice>> DraPlugin::Prepare(const ClaimRef& claim) {
  MutexLock lock(prepare_mu_);
  if (auto recorded = store_.Get(claim.uid)) {
    // A retry, a kubelet restart, a daemon restart: the record answers. The
    // spec is written again in case it was lost (/var/run is a tmpfs).
    GS_RETURN_IF_ERROR(WriteSpec(*recorded, GpuIndex()));
    return DevicesOf(*recorded);
  }
  GS_ASSIGN_OR_RETURN(ClaimInfo info, reader_.Read(claim));
  if (info.devices.empty()) {
    return FailedPrecondition("claim " + claim.claim_namespace + "/" + claim.name +
                              " has no device of driver " + options_.driver_name);
  }
  const std::vector<NodeGpu> gpus = node_gpus_();
  Allocation a;
  a.claim_uid = claim.uid;
  a.claim_namespace = claim.claim_namespace;
  a.claim_name = claim.name;
  a.pod_uids = info.pod_uids;
  a.source = "dra";
  a.tier = info.tier;
  for (const ClaimDevice& d : info.devices) {
    GS_ASSIGN_OR_RETURN(std::string uuid, ResolveDevice(d.device, gpus));
    a.devices.push_back(DeviceShare{.uuid = uuid,
                                    .pool = d.pool,
                                    .device = d.device,
                                    .request = d.request,
                                    .memory_bytes = d.memory_bytes,
                                    .cores_percent = d.cores_percent});
  }
  GS_ASSIGN_OR_RETURN(Allocation recorded, store_.Prepare(a));
  std::map<std::string, uint32_t> index;
  for (const NodeGpu& g : gpus) index[g.uuid] = g.index;
  if (Status s = WriteSpec(recorded, index); !s.ok()) {
    if (Status u = store_.Unprepare(recorded.claim_uid); !u.ok()) {
      GS_LOG(kError, "kubelet", "event=prepare_rollback_failed claim=%s error=\"%s\"",
             recorded.claim_uid.c_str(), u.message().c_str());
    }
    return s;
  }
  GS_LOG(kInfo, "kubelet", "event=claim_prepared claim=%s namespace=%s name=%s devices=%zu",
         claim.uid.c_str(), claim.claim_namespace.c_str(), claim.name.c_str(),
         recorded.devices.size());
  return DevicesOf(recorded);
}

Status DraPlugin::WriteSpec(const Allocation& a, const std::map<std::string, uint32_t>& index) {
  if (a.tier != Tier::kMps || !options_.mps_acquire) return WriteCdiSpec(a, options_.cdi, index);
  GS_RETURN_IF_ERROR(MakeClaimSegmentDir(options_.cdi.shm_dir, a.claim_uid));
  json spec = CdiSpecFor(a, options_.cdi, index);
  std::vector<std::string> uuids;
  for (const auto& [uuid, limit] : LimitsOf(a)) uuids.push_back(uuid);
  const MpsGrant grant = options_.mps_acquire(a.claim_uid, uuids);
  if (grant.tier == Tier::kMps) {
    // The client's edits, as the device plugin's MPS device has them.
    json& edits = spec["devices"][0]["containerEdits"];
    const json client =
        CdiMpsSpecFor(a.claim_uid, grant.env, MpsDirs(grant.env))["devices"][0]["containerEdits"];
    for (const json& e : client["env"]) edits["env"].push_back(e);
    for (const json& m : client.value("mounts", json::array())) edits["mounts"].push_back(m);
    GS_LOG(kInfo, "kubelet", "event=claim_mps claim=%s gpus=%zu", a.claim_uid.c_str(),
           uuids.size());
  } else {
    GS_LOG(kWarn, "kubelet", "event=claim_mps_fallback claim=%s reason=\"%s\"", a.claim_uid.c_str(),
           grant.reason.c_str());
  }
  return WriteCdiFile(CdiSpecPath(options_.cdi.dir, a.claim_uid), spec);
}

Status DraPlugin::Unprepare(const ClaimRef& claim) {
  MutexLock lock(prepare_mu_);
  const std::optional<Allocation> was = store_.Get(claim.uid);
  GS_RETURN_IF_ERROR(store_.Unprepare(claim.uid));
  if (was && was->tier == Tier::kMps && options_.mps_release && !store_.Get(claim.uid)) {
    options_.mps_release(claim.uid);
  }
  if (Status s = RemoveClaimSegmentDir(options_.cdi.shm_dir, claim.uid); !s.ok()) {
    // A process of the claim still attached: the collector removes its
    // segment once abandoned; the empty directory is harmless.
    GS_LOG(kWarn, "kubelet", "event=claim_segments_kept claim=%s error=\"%s\"", claim.uid.c_str(),
           s.message().c_str());
  }
  return RemoveCdiSpec(options_.cdi.dir, claim.uid);
}

DraPlugin::Registration DraPlugin::registration() const {
  MutexLock lock(mu_);
  return registration_;
}

Status DraPlugin::Start() {
  if (server_) return FailedPrecondition("the DRA plugin is already serving");
  const std::map<std::string, uint32_t> index = GpuIndex();
  for (const Allocation& a : store_.All()) {
    if (a.source != "dra") continue;
    if (Status s = WriteSpec(a, index); !s.ok()) {
      GS_LOG(kError, "kubelet", "event=cdi_restore_failed claim=%s error=\"%s\"",
             a.claim_uid.c_str(), s.message().c_str());
    }
  }
  GS_RETURN_IF_ERROR(PrepareSocket(options_.plugin_socket));
  GS_RETURN_IF_ERROR(PrepareSocket(options_.registration_socket));
  services_ = std::make_unique<Services>(*this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + options_.plugin_socket, grpc::InsecureServerCredentials());
  builder.AddListeningPort("unix://" + options_.registration_socket,
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&services_->registration);
  builder.RegisterService(&services_->v1);
  builder.RegisterService(&services_->v1beta1);
  if (options_.health) builder.RegisterService(&services_->health);
  {
    MutexLock lock(mu_);
    stopping_ = false;
  }
  server_ = builder.BuildAndStart();
  if (!server_) {
    services_.reset();
    return Unavailable("cannot serve the DRA plugin on " + options_.plugin_socket + " and " +
                       options_.registration_socket);
  }
  GS_LOG(kInfo, "kubelet", "event=dra_serving socket=%s registration=%s",
         options_.plugin_socket.c_str(), options_.registration_socket.c_str());
  return Status::Ok();
}

void DraPlugin::Stop() {
  if (!server_) return;
  {
    MutexLock lock(mu_);
    stopping_ = true;  // the health streams end
  }
  stop_cv_.notify_all();
  server_->Shutdown();
  server_->Wait();
  server_.reset();
  services_.reset();
  unlink(options_.registration_socket.c_str());
  unlink(options_.plugin_socket.c_str());
}

}  // namespace gpuslice::daemon::kubelet
