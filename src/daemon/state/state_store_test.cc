#include "daemon/state/state_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpuslice::daemon {
namespace {

class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/state_store." + std::to_string(getpid()) + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    auto store = StateStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(store).value();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void WriteRaw(const std::string& name, const std::string& text) {
    std::ofstream(store_->PathOf(name)) << text;
  }
  std::string ReadRaw(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string dir_;
  std::unique_ptr<StateStore> store_;
};

TEST_F(StateStoreTest, SerializedSaveLoadsAsTheSameDocument) {
  const nlohmann::json data = {{"tenants", {{{"host_pid", 7}, {"group", "g\"x"}}}}};
  ASSERT_TRUE(store_->SaveSerialized("tenants", data.dump()).ok());
  auto loaded = store_->Load("tenants");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(*loaded, data);
  EXPECT_EQ(store_->SaveSerialized("Bad/Name", "{}").code(), StatusCode::kInvalidArgument);
}

TEST_F(StateStoreTest, SaveThenLoadRoundTrips) {
  const nlohmann::json data = {{"leases", {{{"gpu", 0}, {"watts", 300}}}}};
  ASSERT_TRUE(store_->Save("leases", data).ok());
  auto loaded = store_->Load("leases");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(*loaded, data);
  struct stat st {};
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_FALSE(std::filesystem::exists(store_->PathOf("leases") + ".tmp"));
}

TEST_F(StateStoreTest, LaterSaveReplacesEarlier) {
  ASSERT_TRUE(store_->Save("groups", {{"n", 1}}).ok());
  ASSERT_TRUE(store_->Save("groups", {{"n", 2}}).ok());
  EXPECT_EQ(store_->Load("groups")->at("n"), 2);
}

TEST_F(StateStoreTest, MissingRecordIsNotFound) {
  EXPECT_EQ(store_->Load("groups").status().code(), StatusCode::kNotFound);
}

TEST_F(StateStoreTest, TruncatedFileIsMovedAsideWithAClearError) {
  ASSERT_TRUE(store_->Save("leases", {{"n", 1}}).ok());
  const std::string whole = ReadRaw(store_->PathOf("leases"));
  WriteRaw("leases", whole.substr(0, whole.size() / 2));
  auto loaded = store_->Load("leases");
  ASSERT_EQ(loaded.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("truncated"), std::string::npos)
      << loaded.status().message();
  EXPECT_NE(loaded.status().message().find(".bad"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(store_->PathOf("leases") + ".bad"));
  // The next load starts clean, and a save works again.
  EXPECT_EQ(store_->Load("leases").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->Save("leases", {{"n", 3}}).ok());
  EXPECT_EQ(store_->Load("leases")->at("n"), 3);
}

TEST_F(StateStoreTest, OtherVersionIsRefusedNotMisread) {
  WriteRaw("leases",
           R"({"format":"gpuslice-state","version":99,"record":"leases","data":{"n":1}})");
  auto loaded = store_->Load("leases");
  ASSERT_EQ(loaded.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("version 99"), std::string::npos)
      << loaded.status().message();
}

TEST_F(StateStoreTest, ForeignOrMislabelledFilesAreRefused) {
  WriteRaw("leases", R"({"hello":"world"})");
  EXPECT_EQ(store_->Load("leases").status().code(), StatusCode::kFailedPrecondition);
  WriteRaw("leases", R"({"format":"gpuslice-state","version":1,"record":"groups","data":{}})");
  auto loaded = store_->Load("leases");
  ASSERT_EQ(loaded.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("'groups'"), std::string::npos);
  WriteRaw("leases", R"({"format":7,"version":"1","record":[],"data":{}})");
  EXPECT_EQ(store_->Load("leases").status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(StateStoreTest, BadNamesAreRejected) {
  EXPECT_EQ(store_->Save("../etc/passwd", {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Save("", {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Load("A B").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StateStoreTest, RemoveForgetsARecord) {
  ASSERT_TRUE(store_->Save("groups", {{"n", 1}}).ok());
  ASSERT_TRUE(store_->Remove("groups").ok());
  EXPECT_EQ(store_->Load("groups").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->Remove("groups").ok());
}

TEST(StateStoreOpenTest, UnwritableDirectoryIsAnError) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes anywhere";
  EXPECT_EQ(StateStore::Open("/proc/gpuslice-state").status().code(), StatusCode::kUnavailable);
}

TEST(StateStoreOpenTest, AFileInTheWayIsAnError) {
  const std::string path = ::testing::TempDir() + "/state_store_file." + std::to_string(getpid());
  std::ofstream(path) << "x";
  EXPECT_FALSE(StateStore::Open(path).ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace gpuslice::daemon
