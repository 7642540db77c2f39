#include "daemon/groups/group_metrics.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

TEST(GroupMetrics, SeriesPerGroupAndGpuFromTheSegment) {
  GroupControllers::GroupControl g{.group = "train", .controlling = true, .segment = {}};
  g.segment.group = "train";
  g.segment.ledger_evictions = 3;
  g.segment.devices.push_back({.index = 0,
                               .uuid = "GPU-a",
                               .memory_used = 3 << 20,
                               .memory_limit = kUnlimitedBytes,
                               .memory_peak = 4 << 20,
                               .alloc_failures = 2,
                               .compute_limit = 30,
                               .grant_bp = 2550,
                               .burst_ns = 0,
                               .share_bp = 2900,
                               .charge_ns = 1000,
                               .launches = 500,
                               .throttled = 120,
                               .throttled_ns = 1'500'000'000});
  GroupControllers::GroupControl other{.group = "x\"y", .controlling = false, .segment = {}};
  GroupControllers::GroupControl paused = g;
  paused.group = "held";
  paused.segment.paused = true;
  const std::string text = FormatGroupMetrics({g, other, paused}, {{"GPU-a", 1}});
  for (
      const char* line : {
          "# TYPE gpuslice_group_throttled_seconds_total counter\n",
          "gpuslice_group_controlled_by_daemon{group=\"train\"} 1\n",
          "gpuslice_group_controlled_by_daemon{group=\"x\\\"y\"} 0\n",
          "# TYPE gpuslice_group_ledger_evictions_total counter\n",
          "gpuslice_group_ledger_evictions_total{group=\"train\"} 3\n",
          "gpuslice_group_ledger_evictions_total{group=\"x\\\"y\"} 0\n",
          "gpuslice_group_launches_total{group=\"train\",gpu=\"1\",uuid=\"GPU-a\"} 500\n",
          "gpuslice_group_compute_grant_percent{group=\"train\",gpu=\"1\",uuid=\"GPU-a\"} 25.50\n",
          "gpuslice_group_compute_grant_percent{group=\"held\",gpu=\"1\",uuid=\"GPU-a\"} 0.00\n",
          "gpuslice_group_launches_throttled_total{group=\"train\",gpu=\"1\",uuid=\"GPU-a\"} 120\n",
          "gpuslice_group_throttled_seconds_total{group=\"train\",gpu=\"1\",uuid=\"GPU-a\"} 1.5\n",
          "gpuslice_group_alloc_refusals_total{group=\"train\",gpu=\"1\",uuid=\"GPU-a\"} 2\n",
          "gpuslice_group_memory_charged_bytes{group=\"train\",gpu=\"1\",uuid=\"GPU-a\"} 3145728\n",
      }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  }
  // An unknown GPU is labelled by its UUID alone.
  const std::string unknown = FormatGroupMetrics({g}, {});
  EXPECT_NE(unknown.find("gpuslice_group_launches_total{group=\"train\",uuid=\"GPU-a\"} 500\n"),
            std::string::npos)
      << unknown;
}

}  // namespace
}  // namespace gpuslice::daemon
