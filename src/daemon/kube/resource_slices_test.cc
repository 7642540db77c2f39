#include "daemon/kube/resource_slices.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "daemon/kube/kube_test_util.h"

namespace gpuslice::daemon::kube {
namespace {

using nlohmann::json;

constexpr const char* kSlices = "/apis/resource.k8s.io/v1/resourceslices";

SliceGpu Gpu(uint32_t index, uint64_t memory = uint64_t{80} << 30) {
  return SliceGpu{.index = index,
                  .uuid = "GPU-" + std::to_string(index),
                  .product = "NVIDIA A100-SXM4-80GB",
                  .memory_bytes = memory,
                  .compute_capability = "8.0",
                  .driver_version = "535.104.05"};
}

TEST(SemverTest, NormalisesDriverAndCapabilityVersions) {
  EXPECT_EQ(SemverOf("8.0"), "8.0.0");
  EXPECT_EQ(SemverOf("535.104.05"), "535.104.5");
  EXPECT_EQ(SemverOf("12"), "12.0.0");
  EXPECT_EQ(SemverOf(""), "");
  EXPECT_EQ(SemverOf("1.2.3.4"), "");
  EXPECT_EQ(SemverOf("8.x"), "");
  EXPECT_EQ(SemverOf("8."), "");
}

// The slice as published passes the Kubernetes schemas, unknown fields
// refused (deploy/validate.mjs, as for the manifests).
TEST(ResourceSliceSchemaTest, APublishedSliceIsAValidResourceSlice) {
  const std::string source = GPUSLICE_SOURCE_DIR;
  if (!std::filesystem::exists(source + "/deploy/node_modules/kubernetes-models")) {
    GTEST_SKIP() << "deploy/node_modules is missing (scripts/setup installs it)";
  }
  TempDir dir;
  const std::string good = dir.path() + "/slice.json";
  const std::string bad = dir.path() + "/bad.json";
  json owner = {
      {"apiVersion", "v1"}, {"kind", "Node"}, {"name", "n1"}, {"uid", "u"}, {"controller", true}};
  json slice = ResourceSliceObject("n1", Gpu(0), 3, 2, owner);
  std::ofstream(good) << slice.dump();  // JSON is YAML
  slice["spec"]["devices"][0]["capacity"]["cores"]["requestPolicy"]["validRange"]["stepp"] = "1";
  std::ofstream(bad) << slice.dump();
  const std::string validate = "node " + source + "/deploy/validate.mjs ";
  EXPECT_EQ(std::system((validate + good + " >/dev/null").c_str()),
            0);  // NOLINT(concurrency-mt-unsafe)
  EXPECT_EQ(std::system((validate + "--expect-invalid " + bad + " >/dev/null")
                            .c_str()),  // NOLINT(concurrency-mt-unsafe)
            0);
}

class SlicePublisherTest : public FakeApiTest {
 protected:
  void SetUp() override {
    FakeApiTest::SetUp();
    node_ = api_->Create("/api/v1/nodes", {{"metadata", {{"name", "n1"}}}});
  }
  std::map<std::string, json> Slices() {
    std::map<std::string, json> out;
    for (json& s : api_->List(kSlices)) out[s["metadata"]["name"]] = s;
    return out;
  }
  json node_;
};

TEST_F(SlicePublisherTest, OneSlicePerGpuWithConsumableCapacity) {
  SlicePublisher p(*client_, "n1");
  ASSERT_TRUE(p.Publish({Gpu(0), Gpu(1)}).ok());
  auto slices = Slices();
  ASSERT_EQ(slices.size(), 2u);
  const json& s = slices.at("n1-gpuslice-gpu0");
  EXPECT_EQ(s["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(s["spec"]["driver"], "gpuslice.io");
  EXPECT_EQ(s["spec"]["nodeName"], "n1");
  EXPECT_EQ(s["spec"]["pool"],
            (json{{"name", "n1"}, {"generation", 1}, {"resourceSliceCount", 2}}));
  const json& owner = s["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "Node");
  EXPECT_EQ(owner["uid"], node_["metadata"]["uid"]);
  const json& d = s["spec"]["devices"][0];
  EXPECT_EQ(d["name"], "gpu0");
  EXPECT_EQ(d["allowMultipleAllocations"], true);
  EXPECT_EQ(d["attributes"]["uuid"]["string"], "GPU-0");
  EXPECT_EQ(d["attributes"]["productName"]["string"], "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(d["attributes"]["memory"]["int"], uint64_t{80} << 30);
  EXPECT_EQ(d["attributes"]["computeCapability"]["version"], "8.0.0");
  EXPECT_EQ(d["attributes"]["driverVersion"]["version"], "535.104.5");
  EXPECT_EQ(d["capacity"]["memory"]["value"], std::to_string(uint64_t{80} << 30));
  EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], "1Mi");
  EXPECT_EQ(d["capacity"]["cores"]["value"], "100");
  EXPECT_EQ(d["capacity"]["cores"]["requestPolicy"]["validRange"],
            (json{{"min", "1"}, {"max", "100"}, {"step", "1"}}));
}

TEST_F(SlicePublisherTest, RepublishingTheSameWritesNothingEvenAfterARestart) {
  SlicePublisher p(*client_, "n1");
  ASSERT_TRUE(p.Publish({Gpu(0), Gpu(1)}).ok());
  const uint64_t rv = api_->resource_version();
  ASSERT_TRUE(p.Publish({Gpu(0), Gpu(1)}).ok());
  SlicePublisher restarted(*client_, "n1");
  ASSERT_TRUE(restarted.Publish({Gpu(1), Gpu(0)}).ok());
  EXPECT_EQ(restarted.writes(), 0u);
  EXPECT_EQ(api_->resource_version(), rv);
}

TEST_F(SlicePublisherTest, AChangedGpuSetBumpsTheGenerationAndDeletesStaleSlices) {
  api_->Create(kSlices, {{"metadata", {{"name", "n2-gpuslice-gpu0"}}},
                         {"spec", {{"nodeName", "n2"}, {"driver", "gpuslice.io"}}}});
  SlicePublisher p(*client_, "n1");
  ASSERT_TRUE(p.Publish({Gpu(0), Gpu(1)}).ok());
  ASSERT_TRUE(p.Publish({Gpu(0, uint64_t{40} << 30)}).ok());
  auto slices = Slices();
  ASSERT_EQ(slices.size(), 2u);  // n1's gpu0, and n2's untouched
  const json& s = slices.at("n1-gpuslice-gpu0");
  EXPECT_EQ(s["spec"]["pool"]["generation"], 2);
  EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_EQ(s["spec"]["devices"][0]["capacity"]["memory"]["value"],
            std::to_string(uint64_t{40} << 30));
  EXPECT_TRUE(slices.contains("n2-gpuslice-gpu0"));
}

TEST_F(SlicePublisherTest, ASliceChangedByAnotherWriterIsReplaced) {
  SlicePublisher p(*client_, "n1");
  ASSERT_TRUE(p.Publish({Gpu(0)}).ok());
  api_->Modify(std::string(kSlices) + "/n1-gpuslice-gpu0",
               [](json& s) { s["spec"]["devices"][0]["allowMultipleAllocations"] = false; });
  ASSERT_TRUE(p.Publish({Gpu(0)}).ok());
  EXPECT_EQ(Slices().at("n1-gpuslice-gpu0")["spec"]["devices"][0]["allowMultipleAllocations"],
            true);
}

TEST_F(SlicePublisherTest, WithoutTheNodeSlicesHaveNoOwnerAndErrorsAreReturned) {
  SlicePublisher p(*client_, "n9");
  ASSERT_TRUE(p.Publish({Gpu(0)}).ok());
  EXPECT_FALSE(Slices().at("n9-gpuslice-gpu0")["metadata"].contains("ownerReferences"));
  api_->FailNextRequests(1, 403);
  Status s = p.Publish({Gpu(0), Gpu(1)});
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
}

}  // namespace
}  // namespace gpuslice::daemon::kube
