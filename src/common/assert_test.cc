#include "common/assert.h"

#include <gtest/gtest.h>

namespace gpuslice {
namespace {

TEST(AssertTest, FailedAssertAborts) {
  const int x = 1;
  EXPECT_DEATH(GS_ASSERT(x == 2, "x is always 2"), "GS_ASSERT\\(x == 2\\) failed: x is always 2");
}

TEST(AssertTest, HoldingAssertDoesNothing) {
  const int x = 2;
  GS_ASSERT(x == 2, "x is always 2");
  SUCCEED();
}

TEST(BugTest, SurvivableBugIsCountedAndTakesTheSafePath) {
  SetBugsFatal(false);
  const uint64_t before = BugCount();
  int safe_path = 0;
  const int slots = -1;
  if (GS_BUG_IF(slots < 0, "negative slot count")) ++safe_path;
  if (GS_BUG_IF(slots > 0, "never")) ++safe_path;
  GS_BUG("unconditional");
  EXPECT_EQ(safe_path, 1);
  EXPECT_EQ(BugCount(), before + 2);
}

TEST(BugTest, FatalBugAborts) {
  EXPECT_DEATH(
      {
        SetBugsFatal(true);
        GS_BUG("fatal under test");
      },
      "fatal under test");
}

}  // namespace
}  // namespace gpuslice
