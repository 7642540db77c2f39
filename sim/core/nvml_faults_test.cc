#include "sim/core/nvml_faults.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace gpuslice::sim {
namespace {

constexpr int kGpuIsLost = 15;
constexpr int kUnknown = 999;

std::string StatePath(const char* name) {
  std::string state =
      ::testing::TempDir() + "nvml_faults_test." + name + "." + std::to_string(getpid());
  unlink(NvmlFaultsPath(state).c_str());
  return state;
}

TEST(NvmlFaultRule, ParsesNamesNumbersAndCountsAndFormatsBack) {
  auto lost = ParseNvmlFaultRule("* 1 GPU_IS_LOST");
  ASSERT_TRUE(lost.ok()) << lost.status().ToString();
  EXPECT_EQ(*lost, (NvmlFaultRule{"*", 1, kGpuIsLost, 0, 0}));
  auto mid = ParseNvmlFaultRule(
      "nvmlDeviceSetPowerManagementLimit  *\tNVML_ERROR_UNKNOWN after=1 times=2");
  ASSERT_TRUE(mid.ok()) << mid.status().ToString();
  EXPECT_EQ(*mid, (NvmlFaultRule{"nvmlDeviceSetPowerManagementLimit", -1, kUnknown, 1, 2}));
  EXPECT_EQ(FormatNvmlFaultRule(*mid),
            "nvmlDeviceSetPowerManagementLimit * UNKNOWN after=1 times=2");
  EXPECT_EQ(ParseNvmlFaultRule(FormatNvmlFaultRule(*mid)).value(), *mid);
  EXPECT_EQ(ParseNvmlFaultRule("* * 10").value().error, 10);
  for (const char* bad :
       {"", "* 1", "* -1 UNKNOWN", "* x UNKNOWN", "* 1 SUCCESS", "* 1 0", "* 1 NO_SUCH_ERROR",
        "* 1 UNKNOWN after=x", "* 1 UNKNOWN later=2", "nvml-Device 1 UNKNOWN"}) {
    EXPECT_FALSE(ParseNvmlFaultRule(bad).ok()) << bad;
  }
}

TEST(NvmlFaultInjector, FailsTheMatchingCallsAfterNForMTimes) {
  const std::string state = StatePath("counts");
  NvmlFaultInjector faults(state);
  EXPECT_EQ(faults.Check("nvmlDeviceSetPowerManagementLimit", 0), 0);  // no file
  ASSERT_TRUE(
      WriteNvmlFaults(state, {{"nvmlDeviceSetPowerManagementLimit", -1, kUnknown, 1, 1}}).ok());
  EXPECT_EQ(faults.Check("nvmlDeviceGetPowerUsage", 0), 0);                   // another function
  EXPECT_EQ(faults.Check("nvmlDeviceSetPowerManagementLimit", 0), 0);         // the first passes
  EXPECT_EQ(faults.Check("nvmlDeviceSetPowerManagementLimit", 1), kUnknown);  // the second fails
  EXPECT_EQ(faults.Check("nvmlDeviceSetPowerManagementLimit", 0), 0);         // once only
  EXPECT_EQ(faults.Check("nvmlDeviceSetPowerManagementLimit", 1), 0);
  unlink(NvmlFaultsPath(state).c_str());
}

TEST(NvmlFaultInjector, ALostGpuFailsEveryCallOnItUntilTheRuleIsRemoved) {
  const std::string state = StatePath("lost");
  NvmlFaultInjector faults(state);
  ASSERT_TRUE(WriteNvmlFaults(state, {{"*", 1, kGpuIsLost, 0, 0}}).ok());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(faults.Check("nvmlDeviceGetUUID", 1), kGpuIsLost);
    EXPECT_EQ(faults.Check("nvmlDeviceGetUUID", 0), 0);
  }
  auto read = ReadNvmlFaults(state);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->size(), 1u);
  ASSERT_TRUE(WriteNvmlFaults(state, {}).ok());
  EXPECT_FALSE(access(NvmlFaultsPath(state).c_str(), F_OK) == 0);
  EXPECT_EQ(faults.Check("nvmlDeviceGetUUID", 1), 0);
}

TEST(NvmlFaultInjector, AChangedFileRestartsTheCountsAndAMalformedOneInjectsNothing) {
  const std::string state = StatePath("change");
  NvmlFaultInjector faults(state);
  ASSERT_TRUE(WriteNvmlFaults(state, {{"f", 0, kUnknown, 0, 1}}).ok());
  EXPECT_EQ(faults.Check("f", 0), kUnknown);
  EXPECT_EQ(faults.Check("f", 0), 0);
  ASSERT_TRUE(WriteNvmlFaults(state, {{"f", 0, kUnknown, 0, 1}, {"g", 0, kGpuIsLost, 0, 0}}).ok());
  EXPECT_EQ(faults.Check("f", 0), kUnknown);  // counted again from the change
  EXPECT_EQ(faults.Check("g", 0), kGpuIsLost);
  std::ofstream(NvmlFaultsPath(state)) << "# a comment\nf 0 UNKNOWN\nthis is not a rule\n";
  auto read = ReadNvmlFaults(state);
  EXPECT_FALSE(read.ok());
  EXPECT_EQ(faults.Check("f", 0), 0);
  unlink(NvmlFaultsPath(state).c_str());
}

}  // namespace
}  // namespace gpuslice::sim
