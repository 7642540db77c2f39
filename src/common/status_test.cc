#include "common/status.h"

#include <gtest/gtest.h>

namespace gpuslice {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  GS_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = NotFound("GPU 7");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "NOT_FOUND: GPU 7");
  EXPECT_EQ(s.WithContext("lookup").message(), "lookup: GPU 7");
}

TEST(StatusOr, PropagatesThroughMacros) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().message(), "3 is odd");
  EXPECT_EQ(Quarter(5).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpuslice
