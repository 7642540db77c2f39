#include "daemon/kubelet/claim_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace gpuslice::daemon::kubelet {
namespace {

using nlohmann::json;

TEST(KubeQuantity, Units) {
  EXPECT_EQ(*ParseKubeQuantity("4Gi"), 4.0L * 1073741824.0L);
  EXPECT_EQ(*ParseKubeQuantity("4G"), 4e9L);  // decimal in Kubernetes
  EXPECT_EQ(*ParseKubeQuantity("4294967296"), 4294967296.0L);
  EXPECT_EQ(*ParseKubeQuantity("30"), 30.0L);
  EXPECT_EQ(*ParseKubeQuantity("512Mi"), 512.0L * 1048576.0L);
  EXPECT_EQ(*ParseKubeQuantity("1.5Ki"), 1536.0L);
  EXPECT_NEAR(static_cast<double>(*ParseKubeQuantity("500m")), 0.5, 1e-12);
  EXPECT_EQ(*ParseKubeQuantity("4e9"), 4e9L);
  EXPECT_EQ(*ParseKubeQuantity("2E"), 2e18L);  // exa, not an exponent
  for (const char* bad : {"", "-1", "Gi", "4GB", "4 Gi", "4x", "1e"}) {
    EXPECT_FALSE(ParseKubeQuantity(bad).ok()) << bad;
  }
}

json Claim(const std::string& uid) {
  return json::parse(R"({
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": "slice", "namespace": "team-a", "uid": ")" +
                     uid + R"("},
    "status": {
      "allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpuslice.io", "pool": "node-1", "device": "gpu-0",
         "consumedCapacity": {"memory": "4Gi", "cores": "30"}},
        {"request": "nic", "driver": "other.example.com", "pool": "p", "device": "nic-0"}
      ]}},
      "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "pod-uid-1"},
                      {"apiGroup": "x", "resource": "jobs", "name": "j", "uid": "job-uid"}]
    }})");
}

TEST(ClaimInfoFromResourceClaim, ReadsThisDriversConsumedCapacity) {
  auto info = ClaimInfoFromResourceClaim(Claim("u-1"), ClaimRef{"team-a", "slice", "u-1"});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_EQ(info->devices.size(), 1u);
  EXPECT_EQ(info->devices[0].device, "gpu-0");
  EXPECT_EQ(info->devices[0].pool, "node-1");
  EXPECT_EQ(info->devices[0].request, "gpu");
  EXPECT_EQ(info->devices[0].memory_bytes, 4ull << 30);
  EXPECT_EQ(info->devices[0].cores_percent, 30u);
  EXPECT_EQ(info->pod_uids, std::vector<std::string>{"pod-uid-1"});
}

// The MPS tier through the claim's opaque configuration (DRA's
// status.allocation.devices.config, as NVIDIA's DRA driver carries its
// sharing strategy): a SliceConfig of this driver for one of its requests;
// anything else of this driver refused with the reason.
TEST(ClaimInfoFromResourceClaim, ASliceConfigAsksForMpsAndNothingElseIsAccepted) {
  const ClaimRef ref{"team-a", "slice", "u-1"};
  auto with = [](const json& config) {
    json c = Claim("u-1");
    c["status"]["allocation"]["devices"]["config"] = config;
    return c;
  };
  const json mps = {
      {"apiVersion", "gpuslice.io/v1alpha1"}, {"kind", "SliceConfig"}, {"tier", "mps"}};
  auto plain = ClaimInfoFromResourceClaim(Claim("u-1"), ref);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->tier, Tier::kShared);
  auto asks = ClaimInfoFromResourceClaim(
      with(json::array({{{"source", "FromClaim"},
                         {"requests", json::array({"gpu"})},
                         {"opaque", {{"driver", "gpuslice.io"}, {"parameters", mps}}}}})),
      ref);
  ASSERT_TRUE(asks.ok()) << asks.status().ToString();
  EXPECT_EQ(asks->tier, Tier::kMps);
  // No requests named: every request; the claim's (later) config wins.
  json shared = mps;
  shared["tier"] = "shared";
  auto later = ClaimInfoFromResourceClaim(
      with(json::array(
          {{{"source", "FromClass"}, {"opaque", {{"driver", "gpuslice.io"}, {"parameters", mps}}}},
           {{"source", "FromClaim"},
            {"opaque", {{"driver", "gpuslice.io"}, {"parameters", shared}}}}})),
      ref);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->tier, Tier::kShared);
  // Another request's, or another driver's (whatever it holds): not ours.
  auto other = ClaimInfoFromResourceClaim(
      with(json::array({{{"requests", json::array({"nic"})},
                         {"opaque", {{"driver", "gpuslice.io"}, {"parameters", mps}}}},
                        {{"opaque", {{"driver", "other.example.com"}, {"parameters", 7}}}}})),
      ref);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->tier, Tier::kShared);
  // Refused, with the reason.
  for (const auto& [parameters, reason] : std::vector<std::pair<json, std::string>>{
           {json{{"apiVersion", "gpuslice.io/v1alpha1"},
                 {"kind", "SliceConfig"},
                 {"tier", "mps"},
                 {"sharing", "timeSlicing"}},
            "unknown field \"sharing\""},
           {json{{"apiVersion", "gpuslice.io/v1alpha1"}, {"kind", "GpuConfig"}, {"tier", "mps"}},
            "is not gpuslice.io/v1alpha1 SliceConfig"},
           {json{{"apiVersion", "gpuslice.io/v2"}, {"kind", "SliceConfig"}}, "is not"},
           {json{{"apiVersion", "gpuslice.io/v1alpha1"}, {"kind", "SliceConfig"}, {"tier", "mig"}},
            "tier \"mig\" is neither"},
           {json("mps"), "parameters must be an object"}}) {
    auto bad = ClaimInfoFromResourceClaim(
        with(json::array({{{"opaque", {{"driver", "gpuslice.io"}, {"parameters", parameters}}}}})),
        ref);
    ASSERT_FALSE(bad.ok()) << parameters.dump();
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(reason), std::string::npos) << bad.status().message();
    EXPECT_NE(bad.status().message().find("claim team-a/slice"), std::string::npos)
        << bad.status().message();
  }
}

TEST(ClaimInfoFromResourceClaim, RefusesAReplacedOrUnallocatedClaim) {
  auto replaced = ClaimInfoFromResourceClaim(Claim("u-2"), ClaimRef{"team-a", "slice", "u-1"});
  EXPECT_EQ(replaced.status().code(), StatusCode::kFailedPrecondition);
  json pending = Claim("u-1");
  pending["status"].erase("allocation");
  auto unallocated = ClaimInfoFromResourceClaim(pending, ClaimRef{"team-a", "slice", "u-1"});
  EXPECT_EQ(unallocated.status().code(), StatusCode::kFailedPrecondition);
  json over = Claim("u-1");
  over["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["cores"] = "101";
  EXPECT_FALSE(ClaimInfoFromResourceClaim(over, ClaimRef{"team-a", "slice", "u-1"}).ok());
}

TEST(ClaimInfoFromResourceClaim, WithoutConsumableCapacityNoLimits) {
  json whole = Claim("u-1");
  whole["status"]["allocation"]["devices"]["results"][0].erase("consumedCapacity");
  auto info = ClaimInfoFromResourceClaim(whole, ClaimRef{"team-a", "slice", "u-1"});
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->devices[0].memory_bytes);
  EXPECT_FALSE(info->devices[0].cores_percent);
}

TEST(FileClaimReader, ReadsNamespaceAndName) {
  const std::string dir = ::testing::TempDir() + "/claims." + std::to_string(getpid());
  std::filesystem::create_directories(dir + "/team-a");
  std::ofstream(dir + "/team-a/slice.json") << Claim("u-1").dump();
  FileClaimReader reader(dir);
  auto info = reader.Read(ClaimRef{"team-a", "slice", "u-1"});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->devices.size(), 1u);
  EXPECT_EQ(reader.Read(ClaimRef{"team-b", "slice", "u-1"}).status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(ApiClaimReader, GetsTheClaimFromTheResourceApiAndKeepsErrorCodes) {
  std::vector<std::string> asked;
  ApiClaimReader reader([&](const std::string& path) -> StatusOr<nlohmann::json> {
    asked.push_back(path);
    if (path.ends_with("/gone")) return NotFound("resourceclaims \"gone\" not found");
    if (path.ends_with("/down")) return Unavailable("connection refused");
    return Claim("u-1");
  });
  auto info = reader.Read(ClaimRef{"team-a", "slice", "u-1"});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->devices.size(), 1u);
  ASSERT_FALSE(asked.empty());
  EXPECT_EQ(asked[0], "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/slice");
  // A claim replaced under the same name (another UID) is not this one.
  EXPECT_EQ(reader.Read(ClaimRef{"team-a", "slice", "u-2"}).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader.Read(ClaimRef{"team-a", "gone", "u-1"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reader.Read(ClaimRef{"team-a", "down", "u-1"}).status().code(),
            StatusCode::kUnavailable);
}

TEST(DeviceNames, PublishedNameAndIndexBothResolve) {
  const std::string uuid = "GPU-3430F1E2-0000-1111-2222-333344445555";
  EXPECT_EQ(DeviceNameOf(uuid), "gpu-3430f1e2-0000-1111-2222-333344445555");
  const std::vector<NodeGpu> gpus = {{0, "GPU-aaaa"}, {1, uuid}};
  EXPECT_EQ(*ResolveDevice(DeviceNameOf(uuid), gpus), uuid);
  EXPECT_EQ(*ResolveDevice("gpu-1", gpus), uuid);
  EXPECT_EQ(*ResolveDevice("gpu1", gpus), uuid);
  EXPECT_EQ(ResolveDevice("gpu-2", gpus).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpuslice::daemon::kubelet
