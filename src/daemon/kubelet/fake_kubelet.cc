#include "daemon/kubelet/fake_kubelet.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "kubelet_proto/dra_v1beta1.grpc.pb.h"

namespace gpuslice::daemon::kubelet {

namespace {

constexpr auto kCallTimeout = std::chrono::seconds(10);

std::shared_ptr<grpc::Channel> Dial(const std::string& socket) {
  return grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials());
}

void Deadline(grpc::ClientContext& ctx) {
  ctx.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
}

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  return Unavailable(what + ": gRPC " + std::to_string(s.error_code()) + " " + s.error_message());
}

// One unary call of `Service` on `socket`, with the deadline: every client
// call of the fake goes through here.
template <typename Service, typename Request, typename Response>
StatusOr<Response> Call(const std::string& socket,
                        grpc::Status (Service::Stub::*method)(grpc::ClientContext*, const Request&,
                                                              Response*),
                        const Request& request, const std::string& what) {
  auto stub = Service::NewStub(Dial(socket));
  grpc::ClientContext ctx;
  Deadline(ctx);
  Response response;
  GS_RETURN_IF_ERROR(FromGrpc(((*stub).*method)(&ctx, request, &response), what));
  return response;
}

// v1beta1 and v1 messages are the same on the wire.
template <typename To, typename From>
To Convert(const From& from) {
  To to;
  to.ParseFromString(from.SerializeAsString());
  return to;
}

}  // namespace

class FakeKubelet::RegistrationService final : public v1beta1::Registration::Service {
 public:
  grpc::Status Register(grpc::ServerContext* /*context*/, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty* /*response*/) override {
    std::lock_guard lock(mu);
    seen.push_back(*request);
    cv.notify_all();
    return grpc::Status::OK;
  }
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::vector<v1beta1::RegisterRequest> seen;
};

class FakeKubelet::PodResourcesService final : public v1::PodResourcesLister::Service {
 public:
  grpc::Status List(grpc::ServerContext* /*context*/, const v1::ListPodResourcesRequest* /*req*/,
                    v1::ListPodResourcesResponse* response) override {
    std::lock_guard lock(mu);
    for (const auto& p : pods) *response->add_pod_resources() = p;
    return grpc::Status::OK;
  }
  grpc::Status Get(grpc::ServerContext* /*context*/, const v1::GetPodResourcesRequest* request,
                   v1::GetPodResourcesResponse* response) override {
    std::lock_guard lock(mu);
    for (const auto& p : pods) {
      if (p.name() == request->pod_name() && p.namespace_() == request->pod_namespace()) {
        *response->mutable_pod_resources() = p;
        return grpc::Status::OK;
      }
    }
    return {grpc::StatusCode::NOT_FOUND, "no such pod"};
  }
  std::mutex mu;
  std::vector<v1::PodResources> pods;
};

FakeKubelet::FakeKubelet() = default;

FakeKubelet::~FakeKubelet() {
  StopDevicePluginManager();
  if (pr_server_) {
    pr_server_->Shutdown();
    pr_server_->Wait();
  }
}

std::vector<std::string> FakeKubelet::FindPluginSockets(const std::string& registry_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(registry_dir, ec)) {
    if (e.is_socket(ec) && e.path().extension() == ".sock") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<pluginregistration::PluginInfo> FakeKubelet::RegisterPlugin(const std::string& socket,
                                                                     bool accept) {
  using Reg = pluginregistration::Registration;
  GS_ASSIGN_OR_RETURN(
      pluginregistration::PluginInfo info,
      Call<Reg>(socket, &Reg::Stub::GetInfo, pluginregistration::InfoRequest(), "GetInfo"));
  pluginregistration::RegistrationStatus status;
  status.set_plugin_registered(accept);
  if (!accept) status.set_error("refused by the fake kubelet");
  GS_RETURN_IF_ERROR(
      Call<Reg>(socket, &Reg::Stub::NotifyRegistrationStatus, status, "NotifyRegistrationStatus")
          .status());
  return info;
}

namespace b1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;

StatusOr<dra_api::NodePrepareResourcesResponse> FakeKubelet::Prepare(
    const std::string& endpoint, const std::vector<dra_api::Claim>& claims,
    const std::string& version) {
  dra_api::NodePrepareResourcesRequest request;
  for (const auto& c : claims) *request.add_claims() = c;
  if (version == "v1beta1") {
    GS_ASSIGN_OR_RETURN(b1::NodePrepareResourcesResponse r,
                        Call<b1::DRAPlugin>(endpoint, &b1::DRAPlugin::Stub::NodePrepareResources,
                                            Convert<b1::NodePrepareResourcesRequest>(request),
                                            "NodePrepareResources v1beta1"));
    return Convert<dra_api::NodePrepareResourcesResponse>(r);
  }
  return Call<dra_api::DRAPlugin>(endpoint, &dra_api::DRAPlugin::Stub::NodePrepareResources,
                                  request, "NodePrepareResources");
}

StatusOr<dra_api::NodeUnprepareResourcesResponse> FakeKubelet::Unprepare(
    const std::string& endpoint, const std::vector<dra_api::Claim>& claims,
    const std::string& version) {
  dra_api::NodeUnprepareResourcesRequest request;
  for (const auto& c : claims) *request.add_claims() = c;
  if (version == "v1beta1") {
    GS_ASSIGN_OR_RETURN(b1::NodeUnprepareResourcesResponse r,
                        Call<b1::DRAPlugin>(endpoint, &b1::DRAPlugin::Stub::NodeUnprepareResources,
                                            Convert<b1::NodeUnprepareResourcesRequest>(request),
                                            "NodeUnprepareResources v1beta1"));
    return Convert<dra_api::NodeUnprepareResourcesResponse>(r);
  }
  return Call<dra_api::DRAPlugin>(endpoint, &dra_api::DRAPlugin::Stub::NodeUnprepareResources,
                                  request, "NodeUnprepareResources");
}

StatusOr<std::vector<v1alpha1::NodeWatchResourcesResponse>> FakeKubelet::WatchHealth(
    const std::string& endpoint,
    const std::function<bool(const v1alpha1::NodeWatchResourcesResponse&)>& done,
    std::chrono::milliseconds timeout) {
  auto stub = v1alpha1::DRAResourceHealth::NewStub(Dial(endpoint));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto reader = stub->NodeWatchResources(&ctx, v1alpha1::NodeWatchResourcesRequest());
  std::vector<v1alpha1::NodeWatchResourcesResponse> updates;
  v1alpha1::NodeWatchResourcesResponse update;
  while (reader->Read(&update)) {
    updates.push_back(update);
    if (done(update)) {
      ctx.TryCancel();
      (void)reader->Finish();
      return updates;
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok() && updates.empty()) return FromGrpc(s, "NodeWatchResources");
  return updates;
}

Status FakeKubelet::StartDevicePluginManager(const std::string& dir) {
  dp_dir_ = dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!registration_) registration_ = std::make_unique<RegistrationService>();
  const std::string socket = dir + "/kubelet.sock";
  unlink(socket.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(registration_.get());
  dp_server_ = builder.BuildAndStart();
  return dp_server_ ? Status::Ok() : Unavailable("cannot serve " + socket);
}

void FakeKubelet::StopDevicePluginManager() {
  if (!dp_server_) return;
  dp_server_->Shutdown();
  dp_server_->Wait();
  dp_server_.reset();
  unlink((dp_dir_ + "/kubelet.sock").c_str());
}

Status FakeKubelet::RestartDevicePluginManager() {
  StopDevicePluginManager();
  // A starting kubelet removes every socket of the directory, the plugins' too.
  for (const std::string& socket : FindPluginSockets(dp_dir_)) unlink(socket.c_str());
  return StartDevicePluginManager(dp_dir_);
}

std::vector<v1beta1::RegisterRequest> FakeKubelet::Registrations() const {
  if (!registration_) return {};
  std::lock_guard lock(registration_->mu);
  return registration_->seen;
}

bool FakeKubelet::WaitForRegistrations(size_t n, std::chrono::milliseconds timeout) const {
  if (!registration_) return false;
  std::unique_lock lock(registration_->mu);
  return registration_->cv.wait_for(lock, timeout, [&] { return registration_->seen.size() >= n; });
}

StatusOr<v1beta1::ListAndWatchResponse> FakeKubelet::ListDevices(const std::string& socket) {
  auto stub = v1beta1::DevicePlugin::NewStub(Dial(socket));
  grpc::ClientContext ctx;
  Deadline(ctx);
  auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
  v1beta1::ListAndWatchResponse response;
  if (!reader->Read(&response)) return Unavailable("ListAndWatch ended without a list");
  ctx.TryCancel();
  (void)reader->Finish();
  return response;
}

StatusOr<std::vector<v1beta1::ListAndWatchResponse>> FakeKubelet::WatchDevices(
    const std::string& socket,
    const std::function<bool(const v1beta1::ListAndWatchResponse&)>& done,
    std::chrono::milliseconds timeout) {
  auto stub = v1beta1::DevicePlugin::NewStub(Dial(socket));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
  std::vector<v1beta1::ListAndWatchResponse> lists;
  v1beta1::ListAndWatchResponse response;
  while (reader->Read(&response)) {
    lists.push_back(response);
    if (done(response)) break;
  }
  ctx.TryCancel();
  (void)reader->Finish();
  if (lists.empty()) return Unavailable("ListAndWatch ended without a list");
  return lists;
}

StatusOr<v1beta1::AllocateResponse> FakeKubelet::Allocate(
    const std::string& socket, const std::vector<std::vector<std::string>>& ids) {
  v1beta1::AllocateRequest request;
  for (const auto& container : ids) {
    auto* c = request.add_container_requests();
    for (const auto& id : container) c->add_devices_ids(id);
  }
  return Call<v1beta1::DevicePlugin>(socket, &v1beta1::DevicePlugin::Stub::Allocate, request,
                                     "Allocate");
}

Status FakeKubelet::PreStart(const std::string& socket, const std::vector<std::string>& ids) {
  v1beta1::PreStartContainerRequest request;
  for (const auto& id : ids) request.add_devices_ids(id);
  auto r = Call<v1beta1::DevicePlugin>(socket, &v1beta1::DevicePlugin::Stub::PreStartContainer,
                                       request, "PreStartContainer");
  return r.ok() ? Status::Ok() : r.status();
}

StatusOr<v1beta1::DevicePluginOptions> FakeKubelet::Options(const std::string& socket) {
  return Call<v1beta1::DevicePlugin>(socket, &v1beta1::DevicePlugin::Stub::GetDevicePluginOptions,
                                     v1beta1::Empty(), "Options");
}

Status FakeKubelet::StartPodResources(const std::string& socket) {
  if (!pod_resources_) pod_resources_ = std::make_unique<PodResourcesService>();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(socket).parent_path(), ec);
  unlink(socket.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(pod_resources_.get());
  pr_server_ = builder.BuildAndStart();
  return pr_server_ ? Status::Ok() : Unavailable("cannot serve " + socket);
}

void FakeKubelet::SetPods(std::vector<v1::PodResources> pods) {
  if (!pod_resources_) pod_resources_ = std::make_unique<PodResourcesService>();
  std::lock_guard lock(pod_resources_->mu);
  pod_resources_->pods = std::move(pods);
}

v1::PodResources PodWithDevices(
    const std::string& name, const std::string& ns,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& devices) {
  v1::PodResources pod;
  pod.set_name(name);
  pod.set_namespace_(ns);
  auto* container = pod.add_containers();
  container->set_name("main");
  for (const auto& [resource, ids] : devices) {
    auto* d = container->add_devices();
    d->set_resource_name(resource);
    for (const std::string& id : ids) d->add_device_ids(id);
  }
  return pod;
}

}  // namespace gpuslice::daemon::kubelet
