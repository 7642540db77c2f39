#include "cli/top/top_view.h"

#include <gtest/gtest.h>

#include <sstream>

namespace gpuslice::cli::top {
namespace {

Sample TwoGroups(double train_share) {
  Sample s;
  s.daemon_answered = true;
  s.socket = "/x.sock";
  GpuInfo gpu;
  gpu.index = 0;
  gpu.uuid = "GPU-aaaa";
  gpu.name = "Sim H100";
  gpu.util_percent = 70;
  gpu.memory_used = 1 << 30;
  gpu.memory_total = 8ull << 30;
  gpu.power_watts = 250;
  gpu.power_limit_watts = 700;
  s.gpus.push_back(gpu);
  GroupOnGpu train;
  train.group = "train";
  train.uuid = "GPU-aaaa";
  train.gpu_index = 0;
  train.compute_limit = 60;
  train.request_percent = 30;
  train.share_percent = train_share;
  train.memory_used = 1 << 20;
  train.memory_limit = 2 << 20;
  train.members = 2;
  GroupOnGpu nb = train;
  nb.group = "nb";
  nb.compute_limit = 20;
  nb.request_percent.reset();
  nb.share_percent = 20;
  nb.paused = true;
  s.groups = {train, nb};
  s.tenants = {{"train", 100, "prod/web-0", 1 << 20, 25.0}};
  return s;
}

std::vector<std::string> LinesOf(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(TopViewTest, PlainFrameHasTheGpusGroupsAndHistory) {
  TopModel m;
  m.Update(TwoGroups(0));
  m.Update(TwoGroups(100));
  const std::string text = PlainFrame(m, TopUi{});
  const auto lines = LinesOf(text);
  ASSERT_GE(lines.size(), 6u) << text;
  EXPECT_NE(lines[0].find("source: gpusliced at /x.sock"), std::string::npos) << text;
  EXPECT_EQ(lines[1].find("GPU"), 0u);
  // The GPU with its share bar (letters by group id: nb A, train B).
  EXPECT_NE(lines[2].find("Sim H100"), std::string::npos) << text;
  EXPECT_NE(lines[2].find("70%"), std::string::npos) << text;
  EXPECT_NE(lines[2].find("250W/700W"), std::string::npos) << text;
  // 20% + 100% (two samplings apart) scaled to the 30 cells: 5 for nb, 25 for train;
  // train's request (30%: 9 cells from its start) marked at cell 13.
  EXPECT_NE(lines[2].find("[AAAAABBBBBBBB|BBBBBBBBBBBBBBBB] A=nb B=train |=request"),
            std::string::npos)
      << text;
  EXPECT_EQ(lines[3].find("GROUP"), 0u);
  EXPECT_EQ(lines[4].find("nb"), 0u);
  EXPECT_NE(lines[4].find("paused"), std::string::npos);
  EXPECT_EQ(lines[5].find("train"), 0u);
  EXPECT_NE(lines[5].find("60%"), std::string::npos);
  EXPECT_NE(lines[5].find("30%"), std::string::npos);     // request
  EXPECT_NE(lines[5].find("100.0%"), std::string::npos);  // share
  EXPECT_NE(lines[5].find("_#"), std::string::npos);      // its history
  EXPECT_NE(lines[5].find("1.00MiB/2.00MiB"), std::string::npos) << lines[5];
  EXPECT_NE(lines[5].find("running"), std::string::npos);
  // nb has no request: a dash in that column.
  EXPECT_EQ(CellsOf(m.Rows(SortKey::kGroup, "")[0]).request, "-");
  EXPECT_EQ(text.back(), '\n');
}

TEST(TopViewTest, PlainFrameShowsAGpusMigInstancesUnderIt) {
  Sample s = TwoGroups(50);
  s.gpus[0].mig = {{.profile = "1g.20gb",
                    .owner = "group/train",
                    .memory_used = 1ull << 30,
                    .memory_total = 20ull << 30},
                   {.profile = "3g.40gb",
                    .owner = "",
                    .memory_used = std::nullopt,
                    .memory_total = 40ull << 30}};
  TopModel m;
  m.Update(s);
  const auto lines = LinesOf(PlainFrame(m, TopUi{}));
  ASSERT_GE(lines.size(), 5u);
  EXPECT_EQ(lines[2].find("GPU"), std::string::npos) << "the GPU's line, then its instances";
  EXPECT_NE(lines[3].find("MIG 1g.20gb"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("1.00GiB/20.00GiB"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("group/train"), std::string::npos) << lines[3];
  EXPECT_NE(lines[4].find("MIG 3g.40gb"), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find("(not gpusliced's)"), std::string::npos) << lines[4];
}

TEST(TopViewTest, PlainFrameSortsFiltersAndShowsTenants) {
  TopModel m;
  m.Update(TwoGroups(50));
  TopUi ui;
  ui.sort = SortKey::kShare;
  auto lines = LinesOf(PlainFrame(m, ui));
  EXPECT_EQ(lines[4].find("train"), 0u);
  ui.filter = "zzz";
  const std::string none = PlainFrame(m, ui);
  EXPECT_NE(none.find("no group matches 'zzz'"), std::string::npos) << none;
  ui.filter = "tra";
  ui.show_tenants = true;
  const std::string text = PlainFrame(m, ui);
  EXPECT_EQ(text.find("\nnb "), std::string::npos) << text;
  EXPECT_NE(text.find("prod/web-0"), std::string::npos) << text;
  EXPECT_NE(text.find("25.0%"), std::string::npos) << text;
}

}  // namespace
}  // namespace gpuslice::cli::top
