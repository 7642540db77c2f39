// The limiter's state and its memory hooks on a fake driver table: what
// cuMemAlloc_v2, cuMemFree_v2 and cuMemGetInfo_v2 do to the group's ledger
// and what reaches the driver, with no driver and no preload.
#include "limiter/process_state.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "limiter/hooks.h"

namespace gpuslice::limiter {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kDeviceBytes = 80ull << 30;

// One GPU with one current context; allocations hand out consecutive
// addresses unless `alloc_rc` says otherwise; every call is counted.
struct FakeDriver {
  CUresult alloc_rc = CUDA_SUCCESS;
  CUresult free_rc = CUDA_SUCCESS;
  int allocs = 0;
  int frees = 0;
  CUdeviceptr next = 0x7f0000000000;
};
FakeDriver g_driver;

CUresult FakeDeviceGetCount(int* count) {
  *count = 1;
  return CUDA_SUCCESS;
}
CUresult FakeDeviceGetUuid(CUuuid* uuid, CUdevice ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::memset(uuid->bytes, 0x5a, sizeof uuid->bytes);
  return CUDA_SUCCESS;
}
CUresult FakeCtxGetCurrent(CUcontext* ctx) {
  *ctx = reinterpret_cast<CUcontext>(uintptr_t{0x1000});  // NOLINT(performance-no-int-to-ptr)
  return CUDA_SUCCESS;
}
CUresult FakeCtxGetDevice(CUdevice* dev) {
  *dev = 0;
  return CUDA_SUCCESS;
}
CUresult FakeMemAlloc(CUdeviceptr* ptr, size_t bytes) {
  ++g_driver.allocs;
  if (g_driver.alloc_rc != CUDA_SUCCESS) return g_driver.alloc_rc;
  *ptr = g_driver.next;
  g_driver.next += bytes;
  return CUDA_SUCCESS;
}
CUresult FakeMemFree(CUdeviceptr /*ptr*/) {
  ++g_driver.frees;
  return g_driver.free_rc;
}
CUresult FakeMemGetInfo(size_t* free, size_t* total) {
  *free = kDeviceBytes;
  *total = kDeviceBytes;
  return CUDA_SUCCESS;
}

real::CudaTable FakeCuda() {
  real::CudaTable cu;
  cu.loaded = true;
  cu.cuDeviceGetCount = &FakeDeviceGetCount;
  cu.cuDeviceGetUuid_v2 = &FakeDeviceGetUuid;
  cu.cuCtxGetCurrent = &FakeCtxGetCurrent;
  cu.cuCtxGetDevice = &FakeCtxGetDevice;
  cu.cuMemAlloc_v2 = &FakeMemAlloc;
  cu.cuMemFree_v2 = &FakeMemFree;
  cu.cuMemGetInfo_v2 = &FakeMemGetInfo;
  return cu;
}

class ProcessStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_driver = FakeDriver{};
    char tmpl[] = "/tmp/gpuslice-process-state-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    env_["GPUSLICE_SHM_DIR"] = dir_;
    env_["GPUSLICE_GROUP"] = "train";
    env_["GPUSLICE_MEMORY_LIMIT"] = "64MiB";
    env_["GPUSLICE_REGISTER"] = "0";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A state on the fake table and this test's environment. An attached
  // state runs a keeper thread on its segment for the rest of the process,
  // so states are never destroyed (kept reachable for LeakSanitizer).
  ProcessState& NewState() {
    static auto* const tables = new std::vector<real::CudaTable*>;
    static auto* const states = new std::vector<ProcessState*>;
    tables->push_back(new real::CudaTable(FakeCuda()));
    const std::map<std::string, std::string> env = env_;
    states->push_back(new ProcessState(
        ProcessSources{.cuda = tables->back(),
                       .nvml = nullptr,
                       .env = [env](std::string_view name) -> const char* {
                         auto it = env.find(std::string(name));  // the state's own copy: stable
                         return it == env.end() ? nullptr : it->second.c_str();
                       }}));
    return *states->back();
  }

  std::string dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(ProcessStateTest, AnAllocationIsChargedRoundedAndGivenBackWhenFreed) {
  ProcessState& state = NewState();
  CUdeviceptr ptr = 0;
  ASSERT_EQ(hooks::cuMemAlloc_v2(state, &ptr, 3 * kMiB), CUDA_SUCCESS);
  EXPECT_NE(ptr, 0u);
  EXPECT_EQ(g_driver.allocs, 1);
  const int device = state.GroupDevice(0);
  ASSERT_EQ(device, 0);
  EXPECT_EQ(state.MemoryUsed(device), 4 * kMiB);  // the 2 MiB granularity

  ASSERT_EQ(hooks::cuMemFree_v2(state, ptr), CUDA_SUCCESS);
  EXPECT_EQ(g_driver.frees, 1);
  EXPECT_EQ(state.MemoryUsed(device), 0u);
}

TEST_F(ProcessStateTest, AnAllocationOverTheLimitNeverReachesTheDriver) {
  ProcessState& state = NewState();
  CUdeviceptr first = 0;
  ASSERT_EQ(hooks::cuMemAlloc_v2(state, &first, 60 * kMiB), CUDA_SUCCESS);
  CUdeviceptr second = 0;
  EXPECT_EQ(hooks::cuMemAlloc_v2(state, &second, 8 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(second, 0u);
  EXPECT_EQ(g_driver.allocs, 1);
  EXPECT_EQ(state.MemoryUsed(0), 60 * kMiB);
  // What is left still fits.
  ASSERT_EQ(hooks::cuMemAlloc_v2(state, &second, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(state.MemoryUsed(0), 64 * kMiB);
}

TEST_F(ProcessStateTest, ADriverRefusalGivesTheReservationBack) {
  ProcessState& state = NewState();
  g_driver.alloc_rc = CUDA_ERROR_OUT_OF_MEMORY;
  CUdeviceptr ptr = 0;
  EXPECT_EQ(hooks::cuMemAlloc_v2(state, &ptr, 8 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(g_driver.allocs, 1);
  EXPECT_EQ(state.MemoryUsed(0), 0u);
}

TEST_F(ProcessStateTest, AFreeTheDriverRefusesKeepsTheCharge) {
  ProcessState& state = NewState();
  CUdeviceptr ptr = 0;
  ASSERT_EQ(hooks::cuMemAlloc_v2(state, &ptr, 2 * kMiB), CUDA_SUCCESS);
  g_driver.free_rc = CUDA_ERROR_INVALID_VALUE;
  EXPECT_EQ(hooks::cuMemFree_v2(state, ptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(state.MemoryUsed(0), 2 * kMiB);
  // A pointer the limiter never handed out frees nothing of the group's.
  g_driver.free_rc = CUDA_SUCCESS;
  EXPECT_EQ(hooks::cuMemFree_v2(state, ptr + 0x100000000), CUDA_SUCCESS);
  EXPECT_EQ(state.MemoryUsed(0), 2 * kMiB);
}

TEST_F(ProcessStateTest, TheGroupSeesItsLimitAsTheDevicesMemory) {
  ProcessState& state = NewState();
  CUdeviceptr ptr = 0;
  ASSERT_EQ(hooks::cuMemAlloc_v2(state, &ptr, 16 * kMiB), CUDA_SUCCESS);
  size_t free = 0, total = 0;
  ASSERT_EQ(hooks::cuMemGetInfo_v2(state, &free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 64 * kMiB);
  EXPECT_EQ(free, 48 * kMiB);
}

TEST_F(ProcessStateTest, TwoStatesOfOneGroupShareItsLimit) {
  ProcessState& first = NewState();
  ProcessState& second = NewState();
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(hooks::cuMemAlloc_v2(first, &a, 48 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(hooks::cuMemAlloc_v2(second, &b, 32 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(second.MemoryUsed(0), 48 * kMiB);  // the group's count, as the first made it
  ASSERT_EQ(hooks::cuMemFree_v2(first, a), CUDA_SUCCESS);
  EXPECT_EQ(hooks::cuMemAlloc_v2(second, &b, 32 * kMiB), CUDA_SUCCESS);
}

TEST_F(ProcessStateTest, AConfigurationErrorFailsClosed) {
  env_["GPUSLICE_MEMORY_LIMIT"] = "a lot";
  ProcessState& state = NewState();
  CUdeviceptr ptr = 0;
  EXPECT_EQ(hooks::cuMemAlloc_v2(state, &ptr, 2 * kMiB), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_TRUE(state.failed_closed());
  EXPECT_EQ(g_driver.allocs, 0);
  // And stays closed: no second attempt, no driver call.
  EXPECT_EQ(hooks::cuMemAlloc_v2(state, &ptr, 2 * kMiB), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(g_driver.allocs, 0);
  EXPECT_EQ(ptr, 0u);
}

TEST_F(ProcessStateTest, AMissingEntryPointIsTheDriversNotSupported) {
  ProcessState& state = NewState();
  // The fake has no cuMemAllocManaged: the hook answers as a driver without it.
  CUdeviceptr ptr = 0;
  EXPECT_EQ(hooks::cuMemAllocManaged(state, &ptr, 2 * kMiB, CU_MEM_ATTACH_GLOBAL),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(state.MemoryUsed(0), 0u);
}

}  // namespace
}  // namespace gpuslice::limiter
