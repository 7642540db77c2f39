#include "daemon/groups/backend_utilization.h"

#include <gtest/gtest.h>

#include "daemon/gpu/fake_backend.h"

namespace gpuslice::daemon {
namespace {

constexpr int64_t kMs = 1'000'000;

std::vector<uint32_t> Pids(const std::vector<control::UtilizationSample>& samples) {
  std::vector<uint32_t> pids;
  pids.reserve(samples.size());
  for (const auto& s : samples) pids.push_back(s.pid);
  return pids;
}

TEST(BackendUtilization, AnswersEveryGroupFromOneReadPerRefresh) {
  FakeBackend backend(2);
  SimulatedClock clock(1'000'000 * kMs);
  BackendUtilization source(backend, clock, 50 * kMs);
  const auto t0 = static_cast<uint64_t>(clock.NowNs() / 1000);
  backend.AddUtilization(1, {{.pid = 10, .timestamp_us = t0 + 1, .sm_percent = 30},
                             {.pid = 11, .timestamp_us = t0 + 2, .sm_percent = 20}});

  auto all = source.SamplesSince("GPU-fake-1", t0);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(Pids(*all), (std::vector<uint32_t>{10, 11}));
  auto newer = source.SamplesSince("GPU-fake-1", t0 + 1);  // another group, further along
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(Pids(*newer), std::vector<uint32_t>{11});

  // Within the refresh period a new sample is not read yet; after it, it is.
  backend.AddUtilization(1, {{.pid = 12, .timestamp_us = t0 + 3, .sm_percent = 5}});
  EXPECT_EQ(Pids(*source.SamplesSince("GPU-fake-1", t0 + 2)), std::vector<uint32_t>{});
  clock.Advance(50 * kMs);
  EXPECT_EQ(Pids(*source.SamplesSince("GPU-fake-1", t0 + 2)), std::vector<uint32_t>{12});
  EXPECT_TRUE(source.SamplesSince("GPU-fake-0", t0)->empty());
}

TEST(BackendUtilization, AnUnknownGpuIsNotFound) {
  FakeBackend backend(1);
  SimulatedClock clock(1'000'000 * kMs);
  BackendUtilization source(backend, clock);
  EXPECT_EQ(source.SamplesSince("GPU-other", 0).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpuslice::daemon
