#include "daemon/mig/mig_manager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "daemon/gpu/fake_backend.h"

namespace gpuslice::daemon {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

std::vector<std::string> Names(const std::vector<MigProfile>& profiles) {
  std::vector<std::string> out;
  for (const MigProfile& p : profiles) out.push_back(p.name);
  return out;
}

TEST(CoveringProfilesTest, TheSmallestProfileThatHoldsTheMemoryAndComputeComesFirst) {
  const std::vector<MigProfile> h100 = FakeH100MigProfiles();
  EXPECT_EQ(Names(CoveringProfiles(h100, 20 * kGiB, std::nullopt)),
            (std::vector<std::string>{"1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}));
  EXPECT_EQ(Names(CoveringProfiles(h100, 21 * kGiB, std::nullopt)),
            (std::vector<std::string>{"3g.40gb", "4g.40gb", "7g.80gb"}));
  // 30 % of seven slices needs three (2/7 is 28.6 %).
  EXPECT_EQ(Names(CoveringProfiles(h100, std::nullopt, 30)),
            (std::vector<std::string>{"3g.40gb", "4g.40gb", "7g.80gb"}));
  EXPECT_EQ(Names(CoveringProfiles(h100, std::nullopt, std::nullopt)).front(), "1g.10gb");
  EXPECT_TRUE(CoveringProfiles(h100, 81 * kGiB, std::nullopt).empty());
}

TEST(FreePlacementsTest, PlacementsOverlappingAnInstanceAreTaken) {
  const std::vector<MigProfile> h100 = FakeH100MigProfiles();
  const MigProfile& three = h100[3];  // 3g.40gb: starts 0 and 4, four slices
  ASSERT_EQ(three.name, "3g.40gb");
  MigInstance one;
  one.placement = {.start = 5, .size = 1};
  EXPECT_EQ(FreePlacements(three, {one}), (std::vector<MigPlacement>{{0, 4}}));
  one.placement = {.start = 3, .size = 1};
  EXPECT_EQ(FreePlacements(three, {one}), (std::vector<MigPlacement>{{4, 4}}));
}

class MigManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/mig_manager." + std::to_string(getpid()) + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    auto store = StateStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(store).value();
    backend_.EnableMig(1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static MigRequest Request(std::string owner, std::optional<uint64_t> memory) {
    return {.owner = std::move(owner),
            .gpus = {"GPU-fake-0", "GPU-fake-1"},
            .memory_bytes = memory,
            .compute_percent = std::nullopt};
  }

  std::string dir_;
  std::unique_ptr<StateStore> store_;
  FakeBackend backend_{2};  // GPU 1 in MIG mode, GPU 0 not
};

TEST_F(MigManagerTest, AGroupGetsAnInstanceOfAtLeastItsMemoryOnAGpuInMigMode) {
  MigManager mig(backend_, store_.get());
  auto g = mig.Acquire(Request("group/train", 20 * kGiB));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->gpu_index, 1u);
  EXPECT_EQ(g->instance.profile, "1g.20gb");
  EXPECT_GE(g->instance.memory_bytes, 20 * kGiB);
  EXPECT_TRUE(g->instance.uuid.starts_with("MIG-")) << g->instance.uuid;
  EXPECT_EQ(g->state, MigGrant::State::kHeld);
  // Asked again, the owner keeps the one it holds.
  auto again = mig.Acquire(Request("group/train", 20 * kGiB));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->instance.uuid, g->instance.uuid);
  EXPECT_EQ(backend_.MigInstances(1)->size(), 1u);

  ASSERT_TRUE(mig.Release("group/train").ok());
  EXPECT_TRUE(backend_.MigInstances(1)->empty());
  EXPECT_FALSE(mig.Held("group/train"));
}

TEST_F(MigManagerTest, TwoOwnersGetDisjointPlacements) {
  MigManager mig(backend_, store_.get());
  auto a = mig.Acquire(Request("group/a", 20 * kGiB));
  auto b = mig.Acquire(Request("group/b", 20 * kGiB));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(a->instance.placement.Overlaps(b->instance.placement));
  EXPECT_NE(a->instance.uuid, b->instance.uuid);
}

TEST_F(MigManagerTest, ARequestNoPlacementHoldsIsRefusedWithTheReasonAndNothingMade) {
  MigManager mig(backend_, store_.get());
  ASSERT_TRUE(mig.Acquire(Request("group/big", 40 * kGiB)).ok());   // 3g.40gb at 0
  ASSERT_TRUE(mig.Acquire(Request("group/big2", 40 * kGiB)).ok());  // 3g.40gb at 4
  auto refused = mig.Acquire(Request("group/third", 40 * kGiB));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("40 GiB"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("GPU 1"), std::string::npos);
  EXPECT_EQ(backend_.MigInstances(1)->size(), 2u);
  EXPECT_FALSE(mig.Held("group/third"));
  EXPECT_NE(mig.FormatMetrics().find("gpuslice_mig_refusals_total 1"), std::string::npos);
}

TEST_F(MigManagerTest, WithoutAGpuInMigModeTheRequestIsRefused) {
  backend_.EnableMig(1, false);
  MigManager mig(backend_, store_.get());
  auto refused = mig.Acquire(Request("group/train", 20 * kGiB));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("MIG mode"), std::string::npos);
}

TEST_F(MigManagerTest, AFailedCreationLeavesNoRecord) {
  backend_.FailMigCreates(1, PermissionDenied("not root"));
  MigManager mig(backend_, store_.get());
  auto refused = mig.Acquire(Request("group/train", 20 * kGiB));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not root"), std::string::npos);
  EXPECT_TRUE(store_->Load("mig")->at("instances").empty());
}

TEST_F(MigManagerTest, AnInstanceInUseStaysRecordedUntilARetryDestroysIt) {
  MigManager mig(backend_, store_.get());
  auto g = mig.Acquire(Request("group/train", std::nullopt));
  ASSERT_TRUE(g.ok());
  backend_.SetMigInUse(1, g->instance.gpu_instance_id, true);
  EXPECT_FALSE(mig.Release("group/train").ok());
  EXPECT_EQ(mig.Held("group/train")->state, MigGrant::State::kReleasing);
  // The owner cannot have another while its old one is being released.
  EXPECT_FALSE(mig.Acquire(Request("group/train", std::nullopt)).ok());
  mig.RetryReleases();
  EXPECT_TRUE(mig.Held("group/train"));
  backend_.SetMigInUse(1, g->instance.gpu_instance_id, false);
  mig.RetryReleases();
  EXPECT_FALSE(mig.Held("group/train"));
  EXPECT_TRUE(backend_.MigInstances(1)->empty());
}

TEST_F(MigManagerTest, ARestartAdoptsWantedInstancesDestroysTheRestAndLeavesTheOperatorsAlone) {
  MigGrant kept;
  {
    MigManager before(backend_, store_.get());
    kept = *before.Acquire(Request("group/kept", std::nullopt));
    ASSERT_TRUE(before.Acquire(Request("group/gone", std::nullopt)).ok());
  }  // the daemon dies holding both
  auto operators = backend_.CreateMigInstance(1, 0 + 9, {.start = 4, .size = 4});  // 3g.40gb
  ASSERT_TRUE(operators.ok()) << operators.status().message();

  MigManager after(backend_, store_.get());
  after.Reconcile([](const std::string& owner) { return owner == "group/kept"; });
  ASSERT_TRUE(after.Held("group/kept"));
  EXPECT_EQ(after.Held("group/kept")->instance, kept.instance);
  EXPECT_FALSE(after.Held("group/gone"));
  const auto listed = backend_.MigInstances(1);
  ASSERT_TRUE(listed.ok());
  std::vector<uint32_t> left;
  for (const MigInstance& m : *listed) left.push_back(m.gpu_instance_id);
  EXPECT_EQ(left,
            (std::vector<uint32_t>{kept.instance.gpu_instance_id, operators->gpu_instance_id}));
  auto views = after.Instances(1);
  ASSERT_TRUE(views.ok());
  ASSERT_EQ(views->size(), 2u);
  EXPECT_EQ((*views)[0].owner, "group/kept");
  EXPECT_EQ((*views)[1].owner, "");
}

TEST_F(MigManagerTest, AnInstanceMadeJustBeforeACrashIsFoundByItsPlacement) {
  // The record says "creating" (saved before the creation); the instance was
  // made, but the daemon died before it recorded the ids.
  ASSERT_TRUE(store_
                  ->Save("mig", {{"instances",
                                  {{{"owner", "group/train"},
                                    {"gpu", "GPU-fake-1"},
                                    {"state", "creating"},
                                    {"profile_id", 15},
                                    {"profile", "1g.20gb"},
                                    {"placement", {{"start", 2}, {"size", 2}}},
                                    {"gpu_instance_id", 0},
                                    {"compute_instance_id", nullptr},
                                    {"uuid", ""},
                                    {"memory_bytes", 20 * kGiB}}}}})
                  .ok());
  auto made = backend_.CreateMigInstance(1, 15, {.start = 2, .size = 2});
  ASSERT_TRUE(made.ok());
  MigManager mig(backend_, store_.get());
  mig.Reconcile([](const std::string&) { return true; });
  ASSERT_TRUE(mig.Held("group/train"));
  EXPECT_EQ(mig.Held("group/train")->instance.uuid, made->uuid);
  EXPECT_EQ(mig.Held("group/train")->state, MigGrant::State::kHeld);
  EXPECT_EQ(store_->Load("mig")->at("instances")[0]["state"], "held");
}

TEST_F(MigManagerTest, GpuJsonNamesEachInstancesOwner) {
  MigManager mig(backend_, store_.get());
  ASSERT_TRUE(mig.Acquire(Request("group/train", std::nullopt)).ok());
  const nlohmann::json j = mig.GpuJson(1);
  EXPECT_EQ(j["mode"], "enabled");
  ASSERT_EQ(j["instances"].size(), 1u);
  EXPECT_EQ(j["instances"][0]["owner"], "group/train");
  EXPECT_EQ(j["instances"][0]["profile"], "1g.10gb");
  EXPECT_EQ(mig.GpuJson(0)["mode"], "disabled");
}

}  // namespace
}  // namespace gpuslice::daemon
