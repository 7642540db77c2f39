#include "limiter/attachment.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace gpuslice::limiter {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

// A driver with `g_devices` GPUs whose UUIDs end in their ordinal; the
// count answers `g_count_rc`.
int g_devices = 0;
CUresult g_count_rc = CUDA_SUCCESS;

CUresult FakeDeviceGetCount(int* count) {
  *count = g_devices;
  return g_count_rc;
}
CUresult FakeDeviceGetUuid(CUuuid* uuid, CUdevice ordinal) {
  if (ordinal < 0 || ordinal >= g_devices) return CUDA_ERROR_INVALID_DEVICE;
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  uuid->bytes[0] = static_cast<char>(0xab);
  uuid->bytes[15] = static_cast<char>(ordinal);
  return CUDA_SUCCESS;
}
real::CudaTable FakeCuda() {
  real::CudaTable cu;
  cu.loaded = true;
  cu.cuDeviceGetCount = &FakeDeviceGetCount;
  cu.cuDeviceGetUuid_v2 = &FakeDeviceGetUuid;
  return cu;
}

nvmlReturn_t FakeNvmlCount(unsigned* count) {
  *count = static_cast<unsigned>(g_devices);
  return NVML_SUCCESS;
}
nvmlReturn_t FakeNvmlHandle(unsigned index, nvmlDevice_t* device) {
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(index) + 1);  // NOLINT
  return NVML_SUCCESS;
}
nvmlReturn_t FakeNvmlUuid(nvmlDevice_t device, char* uuid, unsigned length) {
  const auto index = reinterpret_cast<uintptr_t>(device) - 1;  // NOLINT
  snprintf(uuid, length, "GPU-nvml-%zu", static_cast<size_t>(index));
  return NVML_SUCCESS;
}

class AttachmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_devices = 2;
    g_count_rc = CUDA_SUCCESS;
    char tmpl[] = "/tmp/gpuslice-attach-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    env_["GPUSLICE_SHM_DIR"] = dir_;
    env_["GPUSLICE_GROUP"] = "train";
    env_["GPUSLICE_SOCKET"] = dir_ + "/gpusliced.sock";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  EnvLookup Env() const {
    return [this](std::string_view name) -> const char* {
      auto it = env_.find(std::string(name));
      return it == env_.end() ? nullptr : it->second.c_str();
    };
  }
  std::vector<DriverDevice> Devices() {
    std::vector<DriverDevice> devices;
    EXPECT_EQ(CudaDevices(FakeCuda(), &devices), CUDA_SUCCESS);
    return devices;
  }
  StatusOr<AttachSettings> Settings() {
    return ReadAttachSettings(Env(), Devices(), "0::/\n", 4242, 4242);
  }

  std::string dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(AttachmentTest, TheDriversDevicesAreItsOrdinalsAndUuids) {
  const std::vector<DriverDevice> devices = Devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0], (DriverDevice{0, "GPU-ab000000-0000-0000-0000-000000000000"}));
  EXPECT_EQ(devices[1], (DriverDevice{1, "GPU-ab000000-0000-0000-0000-000000000001"}));
}

TEST_F(AttachmentTest, ADriverThatCannotSayPassesItsErrorOn) {
  std::vector<DriverDevice> devices{{9, "untouched"}};
  g_count_rc = CUDA_ERROR_NOT_INITIALIZED;  // before cuInit
  EXPECT_EQ(CudaDevices(FakeCuda(), &devices), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(devices.size(), 1u);
  EXPECT_EQ(CudaDevices(real::CudaTable{}, &devices), CUDA_ERROR_NOT_INITIALIZED);  // no library
  real::CudaTable old = FakeCuda();
  old.cuDeviceGetUuid_v2 = nullptr;  // a library without the entry point
  EXPECT_EQ(CudaDevices(old, &devices), CUDA_ERROR_NOT_SUPPORTED);
}

TEST_F(AttachmentTest, NvmlListsTheDevicesOfAProcessWithoutCuda) {
  real::NvmlTable nv;
  std::vector<DriverDevice> devices;
  EXPECT_FALSE(NvmlDevices(nv, &devices));  // no library
  nv.nvmlDeviceGetCount_v2 = &FakeNvmlCount;
  nv.nvmlDeviceGetHandleByIndex_v2 = &FakeNvmlHandle;
  nv.nvmlDeviceGetUUID = &FakeNvmlUuid;
  ASSERT_TRUE(NvmlDevices(nv, &devices));
  EXPECT_EQ(devices, (std::vector<DriverDevice>{{0, "GPU-nvml-0"}, {1, "GPU-nvml-1"}}));
}

TEST_F(AttachmentTest, SettingsDefaultToRegisteringOverTheSocketWithTheEstimate) {
  env_["POD_NAME"] = "web-0";
  auto s = Settings();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->config.group, "train");
  EXPECT_EQ(s->shm_dir, dir_);
  EXPECT_EQ(s->context.estimate_bytes, kDefaultContextBytes);
  EXPECT_FALSE(s->context.fixed);
  EXPECT_EQ(s->registration_wait, kDefaultFirstAnswerWait);
  ASSERT_TRUE(s->registration.has_value());
  EXPECT_EQ(s->registration->group, "train");
  EXPECT_EQ(s->registration->devices.size(), 2u);
  EXPECT_EQ(s->registration->pod_name, "web-0");
  EXPECT_EQ(s->registration->pid, 0) << "over a Unix socket the peer credentials say it";
}

TEST_F(AttachmentTest, TheEnvironmentSetsEachPart) {
  env_["GPUSLICE_CONTEXT_BYTES"] = "512MiB";
  env_["GPUSLICE_REGISTER_WAIT_MS"] = "0";
  env_["GPUSLICE_REGISTER"] = "off";
  auto s = Settings();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->context.estimate_bytes, 512ull << 20);
  EXPECT_TRUE(s->context.fixed);
  EXPECT_EQ(s->registration_wait.count(), 0);
  EXPECT_FALSE(s->registration.has_value());

  env_.erase("GPUSLICE_REGISTER");
  env_["HYPERVISOR_IP"] = "127.0.0.1";
  env_["HYPERVISOR_PORT"] = "8000";
  s = ReadAttachSettings(Env(), Devices(), "0::/\n", 1, 4242);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->registration->pid, 4242) << "over TCP the outermost pid is told";
}

TEST_F(AttachmentTest, ABadValueIsAnErrorNamingItsVariable) {
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"GPUSLICE_CONTEXT_BYTES", "lots"},
                                                        {"GPUSLICE_REGISTER_WAIT_MS", "-1"},
                                                        {"GPUSLICE_REGISTER_WAIT_MS", "60001"},
                                                        {"GPUSLICE_MEMORY_LIMIT", "4 parsecs"},
                                                        {"HYPERVISOR_PORT", "8000"}}) {
    std::map<std::string, std::string> saved = env_;
    env_[name] = value;
    auto s = Settings();
    ASSERT_FALSE(s.ok()) << name << "=" << value;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(name), std::string::npos) << s.status().message();
    env_ = std::move(saved);
  }
}

TEST_F(AttachmentTest, AttachingMapsTheDevicesAndLowersTheGroupsLimits) {
  env_["GPUSLICE_MEMORY_LIMIT"] = "4GiB";
  env_["GPUSLICE_COMPUTE_LIMIT"] = "30";
  auto s = Settings();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto a = AttachToGroup(*s, Devices());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->ordinal_to_device.size(), 2u);
  for (int ordinal = 0; ordinal < 2; ++ordinal) {
    const int d = a->ordinal_to_device[ordinal];
    EXPECT_EQ(a->segment->DeviceUuid(d), Devices()[ordinal].second);
    EXPECT_EQ(a->segment->MemoryLimit(d), 4 * kGiB);
    EXPECT_EQ(a->segment->ComputeLimit(d), 30u);
  }
  // A second member's own limits only lower the group's.
  env_["GPUSLICE_MEMORY_LIMIT"] = "8GiB";
  env_["GPUSLICE_COMPUTE_LIMIT"] = "20";
  auto second = AttachToGroup(*Settings(), Devices());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  const int d = second->ordinal_to_device[0];
  EXPECT_EQ(second->segment->MemoryLimit(d), 4 * kGiB);
  EXPECT_EQ(second->segment->ComputeLimit(d), 20u);
  EXPECT_EQ(a->segment->ComputeLimit(a->ordinal_to_device[0]), 20u) << "one segment";
}

TEST_F(AttachmentTest, ASegmentThatCannotBeOpenedNamesTheGroup) {
  env_["GPUSLICE_SHM_DIR"] = dir_ + "/a-file";
  std::FILE* f = std::fopen((dir_ + "/a-file").c_str(), "w");  // not a directory
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  auto s = Settings();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto a = AttachToGroup(*s, Devices());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("group 'train'"), std::string::npos) << a.status().message();
}

}  // namespace
}  // namespace gpuslice::limiter
