#include "daemon/metrics.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

TEST(MetricsTest, FormatsFamiliesWithHelpTypeAndLabels) {
  Snapshot s;
  GpuInfo g;
  g.index = 1;
  g.uuid = "GPU-abc";
  g.name = "H100 \"x\"";
  g.memory_used_bytes = 1024;
  g.power_draw_mw = 70'500;
  g.utilization_gpu_percent = 25;
  g.energy_mj = 12'345;
  s.gpus.push_back(g);
  const std::string text = FormatMetrics(s);
  EXPECT_NE(text.find("# HELP gpuslice_gpu_memory_used_bytes "), std::string::npos);
  EXPECT_NE(text.find("# TYPE gpuslice_gpu_memory_used_bytes gauge\n"), std::string::npos);
  EXPECT_NE(text.find("gpuslice_gpu_memory_used_bytes{gpu=\"1\",uuid=\"GPU-abc\"} 1024\n"),
            std::string::npos);
  EXPECT_NE(text.find("gpuslice_gpu_power_watts{gpu=\"1\",uuid=\"GPU-abc\"} 70.5\n"),
            std::string::npos);
  EXPECT_NE(text.find("gpuslice_gpu_utilization_ratio{gpu=\"1\",uuid=\"GPU-abc\"} 0.25\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE gpuslice_gpu_energy_joules_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("gpuslice_gpu_energy_joules_total{gpu=\"1\",uuid=\"GPU-abc\"} 12.345\n"),
            std::string::npos);
  EXPECT_NE(text.find("name=\"H100 \\\"x\\\"\""), std::string::npos);
  // Every sample line belongs to a family announced before it.
  EXPECT_EQ(text.back(), '\n');
}

TEST(MetricsTest, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

}  // namespace
}  // namespace gpuslice::daemon
