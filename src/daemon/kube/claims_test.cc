#include "daemon/kube/claims.h"

#include <gtest/gtest.h>

#include "daemon/kube/kube_test_util.h"

namespace gpuslice::daemon::kube {
namespace {

using nlohmann::json;

TEST(KubeQuantityTest, BinaryDecimalMilliAndExponents) {
  EXPECT_EQ(*ParseKubeQuantity("4Gi"), uint64_t{4} << 30);
  EXPECT_EQ(*ParseKubeQuantity("4G"), 4'000'000'000u);
  EXPECT_EQ(*ParseKubeQuantity("512Mi"), uint64_t{512} << 20);
  EXPECT_EQ(*ParseKubeQuantity("30"), 30u);
  EXPECT_EQ(*ParseKubeQuantity("1500m"), 2u);  // rounded up
  EXPECT_EQ(*ParseKubeQuantity("1e3"), 1000u);
  EXPECT_EQ(*ParseKubeQuantity("1.5Gi"), uint64_t{3} << 29);
  for (const char* bad : {"", "Gi", "4GB", "-1", "4 Gi", "1..2", "10Ei"}) {
    EXPECT_FALSE(ParseKubeQuantity(bad).ok()) << bad;
  }
}

json Claim() {
  return json::parse(R"({
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": "c", "namespace": "ns", "uid": "claim-uid"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpuslice.io"}}]}},
    "status": {
      "allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpuslice.io", "pool": "n1", "device": "gpu0",
         "shareID": "7f3c", "consumedCapacity": {"memory": "4Gi", "cores": "30"}},
        {"request": "nic", "driver": "other.example.com", "pool": "n1", "device": "eth0"}]}},
      "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}]}})");
}

TEST(ClaimAllocationTest, ReadsOurDriversResultsWithTheirConsumedCapacity) {
  auto a = ParseClaimAllocation(Claim());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->allocated);
  EXPECT_EQ(a->uid, "claim-uid");
  ASSERT_EQ(a->devices.size(), 1u);
  EXPECT_EQ(a->devices[0], (ClaimDevice{.request = "gpu",
                                        .driver = "gpuslice.io",
                                        .pool = "n1",
                                        .device = "gpu0",
                                        .share_id = "7f3c",
                                        .memory_bytes = uint64_t{4} << 30,
                                        .cores_percent = 30u}));
  EXPECT_EQ(a->reserved_for_pods, std::vector<std::string>{"pod-uid"});
}

TEST(ClaimAllocationTest, UnallocatedAndMalformedClaims) {
  json c = Claim();
  c["status"].erase("allocation");
  auto a = ParseClaimAllocation(c);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->allocated);
  json bad = Claim();
  bad["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["cores"] = "lots";
  auto b = ParseClaimAllocation(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("results[0].consumedCapacity.cores"), std::string::npos);
  json over = Claim();
  over["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["cores"] = "130";
  EXPECT_FALSE(ParseClaimAllocation(over).ok());
}

class ApiClaimReaderTest : public FakeApiTest {};

TEST_F(ApiClaimReaderTest, ReadsAClaimFromTheApiServer) {
  api_->Create("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims", Claim());
  ApiClaimReader reader(*client_);
  auto a = reader.Read("ns", "c");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->devices.size(), 1u);
  EXPECT_EQ(a->devices[0].memory_bytes, uint64_t{4} << 30);
  EXPECT_EQ(reader.Read("ns", "missing").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpuslice::daemon::kube
