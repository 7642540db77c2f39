#include "cli/top/top_model.h"

#include <gtest/gtest.h>

namespace gpuslice::cli::top {
namespace {

GroupOnGpu Row(const std::string& group, int gpu, double share, uint64_t memory = 0,
               int members = 1) {
  GroupOnGpu g;
  g.group = group;
  g.gpu_index = gpu;
  g.uuid = "GPU-" + std::to_string(gpu);
  g.share_percent = share;
  g.memory_used = memory;
  g.members = members;
  return g;
}

Sample Of(std::vector<GroupOnGpu> groups, bool daemon = true, int64_t at_ns = 0) {
  Sample s;
  s.at_ns = at_ns;
  s.daemon_answered = daemon;
  s.daemon_error = daemon ? "" : "cannot connect to /x.sock";
  s.socket = "/x.sock";
  s.groups = std::move(groups);
  return s;
}

std::vector<std::string> Names(const std::vector<GroupRow>& rows) {
  std::vector<std::string> out;
  out.reserve(rows.size());
  for (const GroupRow& r : rows)
    out.push_back(r.group.group + "@" + std::to_string(r.group.gpu_index));
  return out;
}

TEST(TopModelTest, SortsByEachColumn) {
  TopModel m;
  GroupOnGpu a = Row("alpha", 1, 10, 300);
  a.compute_limit = 30;
  GroupOnGpu b = Row("beta", 0, 50, 100);
  b.paused = true;
  GroupOnGpu c = Row("gamma", 0, 25, 200);
  c.compute_limit = 60;
  m.Update(Of({b, c, a}));
  using V = std::vector<std::string>;
  EXPECT_EQ(Names(m.Rows(SortKey::kGroup, "")), (V{"alpha@1", "beta@0", "gamma@0"}));
  EXPECT_EQ(Names(m.Rows(SortKey::kGpu, "")), (V{"beta@0", "gamma@0", "alpha@1"}));
  EXPECT_EQ(Names(m.Rows(SortKey::kShare, "")), (V{"beta@0", "gamma@0", "alpha@1"}));
  EXPECT_EQ(Names(m.Rows(SortKey::kMemory, "")), (V{"alpha@1", "gamma@0", "beta@0"}));
  // No limit is the whole GPU.
  EXPECT_EQ(Names(m.Rows(SortKey::kLimit, "")), (V{"beta@0", "gamma@0", "alpha@1"}));
  EXPECT_EQ(Names(m.Rows(SortKey::kState, "")), (V{"alpha@1", "gamma@0", "beta@0"}));
}

TEST(TopModelTest, SortKeysCycleThroughEveryColumn) {
  SortKey k = SortKey::kGroup;
  std::vector<std::string> seen;
  for (int i = 0; i < kSortKeyCount; ++i) {
    seen.emplace_back(SortKeyName(k));
    k = NextSortKey(k);
  }
  EXPECT_EQ(k, SortKey::kGroup);
  EXPECT_EQ(seen, (std::vector<std::string>{"group", "gpu", "share", "memory", "limit", "state"}));
}

TEST(TopModelTest, FiltersByGroupSubstringInAnyCase) {
  TopModel m;
  m.Update(Of({Row("train-a", 0, 1), Row("Notebook", 0, 2), Row("train-b", 1, 3)}));
  using V = std::vector<std::string>;
  EXPECT_EQ(Names(m.Rows(SortKey::kGroup, "TRAIN")), (V{"train-a@0", "train-b@1"}));
  EXPECT_EQ(Names(m.Rows(SortKey::kGroup, "book")), (V{"Notebook@0"}));
  EXPECT_TRUE(m.Rows(SortKey::kGroup, "nothing").empty());
  EXPECT_EQ(m.Rows(SortKey::kGroup, "").size(), 3u);
}

TEST(TopModelTest, KeepsAShareHistoryPerGroupAndGpuAndForgetsGoneRows) {
  TopModel m(/*history=*/3);
  for (double share : {10.0, 20.0, 30.0, 40.0}) {
    GroupOnGpu unmeasured = Row("b", 0, 0);
    unmeasured.share_percent.reset();
    m.Update(Of({Row("a", 0, share), Row("a", 1, share / 2), unmeasured}));
  }
  auto rows = m.Rows(SortKey::kGroup, "");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].history, (std::vector<double>{20, 30, 40}));
  EXPECT_EQ(rows[1].history, (std::vector<double>{10, 15, 20}));
  EXPECT_EQ(rows[2].history, (std::vector<double>{-1, -1, -1}));
  m.Update(Of({Row("b", 0, 5)}));
  m.Update(Of({Row("a", 0, 50), Row("b", 0, 5)}));
  rows = m.Rows(SortKey::kGroup, "a");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].history, (std::vector<double>{50}));  // a new history
}

TEST(TopModelTest, SparklineDrawsLevelsGapsAndTheLastValues) {
  EXPECT_EQ(Sparkline({0, 50, 100, -1}, 10, /*ascii=*/true), "_=# ");
  EXPECT_EQ(Sparkline({0, 100}, 10, /*ascii=*/false), "▁█");
  EXPECT_EQ(Sparkline({100, 0, 0, 100}, 2, /*ascii=*/true), "_#");  // the last two
  EXPECT_EQ(Sparkline({250}, 4, /*ascii=*/true), "#");              // clamped
  EXPECT_EQ(Sparkline({}, 4, true), "");
}

TEST(TopModelTest, DerivesStateFromPauseThrottledCountersAndMembers) {
  GroupOnGpu g = Row("g", 0, 10);
  EXPECT_EQ(DeriveState(g, std::nullopt), GroupState::kRunning);
  g.throttled = 5;
  EXPECT_EQ(DeriveState(g, std::nullopt), GroupState::kRunning);  // no previous sample
  EXPECT_EQ(DeriveState(g, 5), GroupState::kRunning);             // no new wait
  EXPECT_EQ(DeriveState(g, 4), GroupState::kThrottled);
  g.paused = true;
  EXPECT_EQ(DeriveState(g, 4), GroupState::kPaused);
  g.paused = false;
  g.members = 0;
  g.throttled.reset();
  EXPECT_EQ(DeriveState(g, std::nullopt), GroupState::kIdle);

  // Through the model: the counter's growth between samples.
  TopModel m;
  GroupOnGpu t = Row("t", 0, 30);
  t.throttled = 100;
  m.Update(Of({t}));
  EXPECT_EQ(m.Rows(SortKey::kGroup, "")[0].state, GroupState::kRunning);
  t.throttled = 180;
  m.Update(Of({t}));
  EXPECT_EQ(m.Rows(SortKey::kGroup, "")[0].state, GroupState::kThrottled);
  m.Update(Of({t}));
  EXPECT_EQ(m.Rows(SortKey::kGroup, "")[0].state, GroupState::kRunning);
}

TEST(TopModelTest, ShareBarSplitsTheGpuByMeasuredShare) {
  TopModel m;
  GroupOnGpu none = Row("c", 0, 0);
  none.share_percent.reset();
  m.Update(Of({Row("a", 0, 50), Row("b", 0, 25), none, Row("d", 1, 80)}));
  const auto bar = ShareBar(m.RowsOnGpu("GPU-0"), 20);
  ASSERT_EQ(bar.size(), 3u);
  EXPECT_EQ(bar[0], (std::pair<std::string, int>{"a", 10}));
  EXPECT_EQ(bar[1], (std::pair<std::string, int>{"b", 5}));
  EXPECT_EQ(bar[2], (std::pair<std::string, int>{"c", 0}));
  // Over 100% in total (two samplings apart): scaled to the bar.
  m.Update(Of({Row("a", 0, 90), Row("b", 0, 60)}));
  const auto over = ShareBar(m.RowsOnGpu("GPU-0"), 10);
  EXPECT_EQ(over[0].second + over[1].second, 10);
  EXPECT_EQ(over[0].second, 6);
}

TEST(TopModelTest, SaysWhenTheDaemonGoesAndKeepsTheSegmentsData) {
  TopModel m;
  m.Update(Of({Row("g", 0, 40)}, /*daemon=*/false));
  EXPECT_FALSE(m.daemon_lost());  // never answered: no daemon, not a lost one
  EXPECT_NE(m.SourceLine().find("no daemon"), std::string::npos) << m.SourceLine();
  m.Update(Of({Row("g", 0, 41)}, /*daemon=*/true));
  EXPECT_EQ(m.SourceLine(), "source: gpusliced at /x.sock");
  m.Update(Of({Row("g", 0, 42)}, /*daemon=*/false, 1'000'000'000));
  EXPECT_TRUE(m.daemon_lost());
  EXPECT_NE(m.SourceLine().find("gpusliced stopped answering"), std::string::npos)
      << m.SourceLine();
  EXPECT_NE(m.SourceLine().find("cannot connect to /x.sock"), std::string::npos);
  EXPECT_NE(m.SourceLine().find("showing group segments"), std::string::npos);
  // The rows go on, with their history.
  auto rows = m.Rows(SortKey::kGroup, "");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].history, (std::vector<double>{40, 41, 42}));
  m.Update(Of({Row("g", 0, 43)}, /*daemon=*/true));
  EXPECT_FALSE(m.daemon_lost());
}

TEST(TopModelTest, AGpuKeepsTheIndexAndNameTheDaemonGaveIt) {
  TopModel m;
  Sample named = Of({Row("g", 3, 10)});
  GpuInfo gpu;
  gpu.index = 3;
  gpu.uuid = "GPU-3";
  gpu.name = "Sim";
  named.gpus = {gpu};
  m.Update(named);
  Sample segments_only = Of({Row("g", -1, 10)}, /*daemon=*/false);
  segments_only.groups[0].uuid = "GPU-3";
  GpuInfo bare;
  bare.uuid = "GPU-3";
  GpuInfo never_named;
  never_named.uuid = "GPU-9";
  segments_only.gpus = {bare, never_named};
  m.Update(segments_only);
  EXPECT_EQ(m.sample().gpus[0].index, 3);
  EXPECT_EQ(m.sample().gpus[0].name, "Sim");
  EXPECT_EQ(m.sample().gpus[1].index, -1);
  EXPECT_EQ(m.Rows(SortKey::kGroup, "")[0].group.gpu_index, 3);
}

TEST(TopModelTest, TenantsOfAGroupByPid) {
  TopModel m;
  Sample s = Of({Row("g", 0, 1)});
  s.tenants = {{"g", 30, "b", 0, {}}, {"h", 5, "x", 0, {}}, {"g", 10, "a", 0, {}}};
  m.Update(s);
  const auto t = m.TenantsOf("g");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].pid, 10);
  EXPECT_EQ(t[1].pid, 30);
}

}  // namespace
}  // namespace gpuslice::cli::top
