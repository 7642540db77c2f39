#include "daemon/groups/backend_busy.h"

#include <gtest/gtest.h>

#include "daemon/gpu/fake_backend.h"

namespace gpuslice::daemon {
namespace {

TEST(BackendBusy, ReadsTheGpuWithTheUuidFromItsBackend) {
  FakeBackend backend(2);
  BackendBusy source(backend);
  backend.AddBusy(1, {{.timestamp_us = 100, .percent = 40}, {.timestamp_us = 300, .percent = 97}});
  backend.AddBusy(0, {{.timestamp_us = 200, .percent = 5}});

  auto all = source.BusySince("GPU-fake-1", 0);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].percent, 40u);
  EXPECT_EQ((*all)[1].timestamp_us, 300u);
  auto newer = source.BusySince("GPU-fake-1", 100);
  ASSERT_TRUE(newer.ok());
  ASSERT_EQ(newer->size(), 1u);
  EXPECT_EQ((*newer)[0].percent, 97u);
  EXPECT_EQ(source.BusySince("GPU-fake-0", 0)->size(), 1u);
}

TEST(BackendBusy, AnUnknownGpuIsNotFound) {
  FakeBackend backend(1);
  BackendBusy source(backend);
  EXPECT_EQ(source.BusySince("GPU-other", 0).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpuslice::daemon
