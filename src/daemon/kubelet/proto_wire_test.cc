// The kubelet API definitions in proto/ against the published ones: the gRPC
// method paths and the field numbers are the wire format, so a typo in either
// would make gpusliced unable to talk to a real kubelet while every test
// against our own fake kubelet still passed. These are checked here, name by
// name, from the upstream definitions.
#include <gtest/gtest.h>

#include <string>

#include "kubelet_proto/deviceplugin_v1beta1.grpc.pb.h"
#include "kubelet_proto/dra_health_v1alpha1.grpc.pb.h"
#include "kubelet_proto/dra_v1.grpc.pb.h"
#include "kubelet_proto/dra_v1beta1.grpc.pb.h"
#include "kubelet_proto/pluginregistration_v1.grpc.pb.h"
#include "kubelet_proto/podresources_v1.grpc.pb.h"

namespace gpuslice::daemon::kubelet {
namespace {

using google::protobuf::Descriptor;

int FieldNumber(const Descriptor* d, const std::string& name) {
  const auto* f = d->FindFieldByName(name);
  return f == nullptr ? -1 : f->number();
}

TEST(KubeletProtoWire, ServiceNamesAreUpstreams) {
  EXPECT_EQ(pluginregistration::Registration::service_full_name(),
            std::string("pluginregistration.Registration"));
  EXPECT_EQ(k8s::io::kubelet::pkg::apis::dra::v1::DRAPlugin::service_full_name(),
            std::string("k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"));
  EXPECT_EQ(k8s::io::kubelet::pkg::apis::dra::v1beta1::DRAPlugin::service_full_name(),
            std::string("k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"));
  EXPECT_EQ(v1beta1::Registration::service_full_name(), std::string("v1beta1.Registration"));
  EXPECT_EQ(v1beta1::DevicePlugin::service_full_name(), std::string("v1beta1.DevicePlugin"));
  EXPECT_EQ(v1::PodResourcesLister::service_full_name(), std::string("v1.PodResourcesLister"));
}

TEST(KubeletProtoWire, PluginRegistrationFields) {
  const Descriptor* info = pluginregistration::PluginInfo::descriptor();
  EXPECT_EQ(FieldNumber(info, "type"), 1);
  EXPECT_EQ(FieldNumber(info, "name"), 2);
  EXPECT_EQ(FieldNumber(info, "endpoint"), 3);
  EXPECT_EQ(FieldNumber(info, "supported_versions"), 4);
  const Descriptor* status = pluginregistration::RegistrationStatus::descriptor();
  EXPECT_EQ(FieldNumber(status, "plugin_registered"), 1);
  EXPECT_EQ(FieldNumber(status, "error"), 2);
}

template <typename Claim, typename Device, typename Resp, typename UnResp>
void ExpectDraFields() {
  EXPECT_EQ(FieldNumber(Claim::descriptor(), "namespace"), 1);
  EXPECT_EQ(FieldNumber(Claim::descriptor(), "uid"), 2);
  EXPECT_EQ(FieldNumber(Claim::descriptor(), "name"), 3);
  EXPECT_EQ(FieldNumber(Device::descriptor(), "request_names"), 1);
  EXPECT_EQ(FieldNumber(Device::descriptor(), "pool_name"), 2);
  EXPECT_EQ(FieldNumber(Device::descriptor(), "device_name"), 3);
  EXPECT_EQ(FieldNumber(Device::descriptor(), "cdi_device_ids"), 4);
  EXPECT_EQ(FieldNumber(Resp::descriptor(), "devices"), 1);
  EXPECT_EQ(FieldNumber(Resp::descriptor(), "error"), 2);
  EXPECT_EQ(FieldNumber(UnResp::descriptor(), "error"), 1);
}

TEST(KubeletProtoWire, DraFieldsInBothVersions) {
  namespace v1 = k8s::io::kubelet::pkg::apis::dra::v1;
  namespace b1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;
  ExpectDraFields<v1::Claim, v1::Device, v1::NodePrepareResourceResponse,
                  v1::NodeUnprepareResourceResponse>();
  ExpectDraFields<b1::Claim, b1::Device, b1::NodePrepareResourceResponse,
                  b1::NodeUnprepareResourceResponse>();
  // A v1beta1 message reads as the v1 one: same numbers, same types.
  b1::Claim beta;
  beta.set_namespace_("ns");
  beta.set_uid("u");
  beta.set_name("n");
  v1::Claim ga;
  ASSERT_TRUE(ga.ParseFromString(beta.SerializeAsString()));
  EXPECT_EQ(ga.namespace_(), "ns");
  EXPECT_EQ(ga.uid(), "u");
  EXPECT_EQ(ga.name(), "n");
}

TEST(KubeletProtoWire, DraHealthV1alpha1) {
  EXPECT_EQ(v1alpha1::DRAResourceHealth::service_full_name(),
            std::string("v1alpha1.DRAResourceHealth"));
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      "v1alpha1.DRAResourceHealth");
  ASSERT_NE(service, nullptr);
  const auto* method = service->FindMethodByName("NodeWatchResources");
  ASSERT_NE(method, nullptr);
  EXPECT_TRUE(method->server_streaming());
  EXPECT_EQ(FieldNumber(v1alpha1::DeviceIdentifier::descriptor(), "pool_name"), 1);
  EXPECT_EQ(FieldNumber(v1alpha1::DeviceIdentifier::descriptor(), "device_name"), 2);
  EXPECT_EQ(FieldNumber(v1alpha1::DeviceHealth::descriptor(), "device"), 1);
  EXPECT_EQ(FieldNumber(v1alpha1::DeviceHealth::descriptor(), "health"), 2);
  EXPECT_EQ(FieldNumber(v1alpha1::DeviceHealth::descriptor(), "last_updated_time"), 3);
  EXPECT_EQ(FieldNumber(v1alpha1::NodeWatchResourcesResponse::descriptor(), "devices"), 1);
  EXPECT_EQ(v1alpha1::UNKNOWN, 0);
  EXPECT_EQ(v1alpha1::HEALTHY, 1);
  EXPECT_EQ(v1alpha1::UNHEALTHY, 2);
}

TEST(KubeletProtoWire, DevicePluginFields) {
  EXPECT_EQ(FieldNumber(v1beta1::RegisterRequest::descriptor(), "version"), 1);
  EXPECT_EQ(FieldNumber(v1beta1::RegisterRequest::descriptor(), "endpoint"), 2);
  EXPECT_EQ(FieldNumber(v1beta1::RegisterRequest::descriptor(), "resource_name"), 3);
  EXPECT_EQ(FieldNumber(v1beta1::RegisterRequest::descriptor(), "options"), 4);
  EXPECT_EQ(FieldNumber(v1beta1::DevicePluginOptions::descriptor(), "pre_start_required"), 1);
  EXPECT_EQ(
      FieldNumber(v1beta1::DevicePluginOptions::descriptor(), "get_preferred_allocation_available"),
      2);
  EXPECT_EQ(FieldNumber(v1beta1::Device::descriptor(), "ID"), 1);
  EXPECT_EQ(FieldNumber(v1beta1::Device::descriptor(), "health"), 2);
  EXPECT_EQ(FieldNumber(v1beta1::Device::descriptor(), "topology"), 3);
  EXPECT_EQ(FieldNumber(v1beta1::ContainerAllocateRequest::descriptor(), "devices_ids"), 1);
  const Descriptor* car = v1beta1::ContainerAllocateResponse::descriptor();
  EXPECT_EQ(FieldNumber(car, "envs"), 1);
  EXPECT_EQ(FieldNumber(car, "mounts"), 2);
  EXPECT_EQ(FieldNumber(car, "devices"), 3);
  EXPECT_EQ(FieldNumber(car, "annotations"), 4);
  EXPECT_EQ(FieldNumber(car, "cdi_devices"), 5);
  EXPECT_EQ(FieldNumber(v1beta1::Mount::descriptor(), "container_path"), 1);
  EXPECT_EQ(FieldNumber(v1beta1::Mount::descriptor(), "host_path"), 2);
  EXPECT_EQ(FieldNumber(v1beta1::Mount::descriptor(), "read_only"), 3);
  const Descriptor* pref = v1beta1::ContainerPreferredAllocationRequest::descriptor();
  EXPECT_EQ(FieldNumber(pref, "available_deviceIDs"), 1);
  EXPECT_EQ(FieldNumber(pref, "must_include_deviceIDs"), 2);
  EXPECT_EQ(FieldNumber(pref, "allocation_size"), 3);
}

TEST(KubeletProtoWire, PodResourcesFields) {
  EXPECT_EQ(FieldNumber(v1::PodResources::descriptor(), "name"), 1);
  EXPECT_EQ(FieldNumber(v1::PodResources::descriptor(), "namespace"), 2);
  EXPECT_EQ(FieldNumber(v1::PodResources::descriptor(), "containers"), 3);
  EXPECT_EQ(FieldNumber(v1::ContainerResources::descriptor(), "devices"), 2);
  EXPECT_EQ(FieldNumber(v1::ContainerResources::descriptor(), "dynamic_resources"), 5);
  EXPECT_EQ(FieldNumber(v1::ContainerDevices::descriptor(), "resource_name"), 1);
  EXPECT_EQ(FieldNumber(v1::ContainerDevices::descriptor(), "device_ids"), 2);
  EXPECT_EQ(FieldNumber(v1::DynamicResource::descriptor(), "claim_name"), 2);
  EXPECT_EQ(FieldNumber(v1::DynamicResource::descriptor(), "claim_namespace"), 3);
  EXPECT_EQ(FieldNumber(v1::GetPodResourcesRequest::descriptor(), "pod_name"), 1);
  EXPECT_EQ(FieldNumber(v1::GetPodResourcesRequest::descriptor(), "pod_namespace"), 2);
}

}  // namespace
}  // namespace gpuslice::daemon::kubelet
