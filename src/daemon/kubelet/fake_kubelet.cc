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
  auto stub = pluginregistration::Registration::NewStub(Dial(socket));
  pluginregistration::PluginInfo info;
  {
    grpc::ClientContext ctx;
    Deadline(ctx);
    GS_RETURN_IF_ERROR(FromGrpc(stub->GetInfo(&ctx, {}, &info), "GetInfo"));
  }
  pluginregistration::RegistrationStatus status;
  status.set_plugin_registered(accept);
  if (!accept) status.set_error("refused by the fake kubelet");
  pluginregistration::RegistrationStatusResponse response;
  grpc::ClientContext ctx;
  Deadline(ctx);
  GS_RETURN_IF_ERROR(FromGrpc(stub->NotifyRegistrationStatus(&ctx, status, &response),
                              "NotifyRegistrationStatus"));
  return info;
}

StatusOr<dra_api::NodePrepareResourcesResponse> FakeKubelet::Prepare(
    const std::string& endpoint, const std::vector<dra_api::Claim>& claims,
    const std::string& version) {
  dra_api::NodePrepareResourcesRequest request;
  for (const auto& c : claims) *request.add_claims() = c;
  grpc::ClientContext ctx;
  Deadline(ctx);
  if (version == "v1beta1") {
    namespace b1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;
    auto stub = b1::DRAPlugin::NewStub(Dial(endpoint));
    b1::NodePrepareResourcesResponse response;
    GS_RETURN_IF_ERROR(
        FromGrpc(stub->NodePrepareResources(&ctx, Convert<b1::NodePrepareResourcesRequest>(request),
                                            &response),
                 "NodePrepareResources v1beta1"));
    return Convert<dra_api::NodePrepareResourcesResponse>(response);
  }
  auto stub = dra_api::DRAPlugin::NewStub(Dial(endpoint));
  dra_api::NodePrepareResourcesResponse response;
  GS_RETURN_IF_ERROR(
      FromGrpc(stub->NodePrepareResources(&ctx, request, &response), "NodePrepareResources"));
  return response;
}

StatusOr<dra_api::NodeUnprepareResourcesResponse> FakeKubelet::Unprepare(
    const std::string& endpoint, const std::vector<dra_api::Claim>& claims,
    const std::string& version) {
  dra_api::NodeUnprepareResourcesRequest request;
  for (const auto& c : claims) *request.add_claims() = c;
  grpc::ClientContext ctx;
  Deadline(ctx);
  if (version == "v1beta1") {
    namespace b1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;
    auto stub = b1::DRAPlugin::NewStub(Dial(endpoint));
    b1::NodeUnprepareResourcesResponse response;
    GS_RETURN_IF_ERROR(
        FromGrpc(stub->NodeUnprepareResources(
                     &ctx, Convert<b1::NodeUnprepareResourcesRequest>(request), &response),
                 "NodeUnprepareResources v1beta1"));
    return Convert<dra_api::NodeUnprepareResourcesResponse>(response);
  }
  auto stub = dra_api::DRAPlugin::NewStub(Dial(endpoint));
  dra_api::NodeUnprepareResourcesResponse response;
  GS_RETURN_IF_ERROR(
      FromGrpc(stub->NodeUnprepareResources(&ctx, request, &response), "NodeUnprepareResources"));
  return response;
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

StatusOr<v1beta1::AllocateResponse> FakeKubelet::Allocate(
    const std::string& socket, const std::vector<std::vector<std::string>>& ids) {
  auto stub = v1beta1::DevicePlugin::NewStub(Dial(socket));
  v1beta1::AllocateRequest request;
  for (const auto& container : ids) {
    auto* c = request.add_container_requests();
    for (const auto& id : container) c->add_devices_ids(id);
  }
  v1beta1::AllocateResponse response;
  grpc::ClientContext ctx;
  Deadline(ctx);
  GS_RETURN_IF_ERROR(FromGrpc(stub->Allocate(&ctx, request, &response), "Allocate"));
  return response;
}

StatusOr<v1beta1::DevicePluginOptions> FakeKubelet::Options(const std::string& socket) {
  auto stub = v1beta1::DevicePlugin::NewStub(Dial(socket));
  v1beta1::DevicePluginOptions options;
  grpc::ClientContext ctx;
  Deadline(ctx);
  GS_RETURN_IF_ERROR(
      FromGrpc(stub->GetDevicePluginOptions(&ctx, v1beta1::Empty(), &options), "Options"));
  return options;
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

}  // namespace gpuslice::daemon::kubelet
