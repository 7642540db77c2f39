#include "common/log.h"

#include <gtest/gtest.h>

namespace gpuslice {
namespace {

// Each test runs in a process of its own (ctest): nothing chose a level yet.
TEST(LogTest, OffUntilABinaryChoosesItsLevel) {
  EXPECT_FALSE(LogEnabled(LogLevel::kError));
  SetLogLevel(LogLevel::kWarn);
  EXPECT_TRUE(LogEnabled(LogLevel::kWarn));
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  SetLogLevel(LogLevel::kOff);
  EXPECT_FALSE(LogEnabled(LogLevel::kError));
}

}  // namespace
}  // namespace gpuslice
