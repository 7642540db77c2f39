#include "cli/top/top_keys.h"

#include <gtest/gtest.h>

namespace gpuslice::cli::top {
namespace {

std::vector<GroupRow> Rows() {
  std::vector<GroupRow> rows;
  for (const char* id : {"a", "b", "b", "c"}) {
    GroupRow r;
    r.group.group = id;
    r.state = std::string(id) == "c" ? GroupState::kPaused : GroupState::kRunning;
    rows.push_back(r);
  }
  return rows;
}

void Type(TopUi& ui, const std::string& text, const std::vector<GroupRow>& rows) {
  for (char c : text) HandleKey(ui, c, rows);
}

TEST(TopKeysTest, QuitSortAndTenants) {
  TopUi ui;
  const auto rows = Rows();
  EXPECT_EQ(HandleKey(ui, 'q', rows).kind, KeyAction::Kind::kQuit);
  EXPECT_EQ(HandleKey(ui, 's', rows).kind, KeyAction::Kind::kNone);
  EXPECT_EQ(ui.sort, SortKey::kGpu);
  EXPECT_EQ(ui.status, "sorted by gpu");
  HandleKey(ui, 't', rows);
  EXPECT_TRUE(ui.show_tenants);
  HandleKey(ui, kKeyEnter, rows);
  EXPECT_FALSE(ui.show_tenants);
}

TEST(TopKeysTest, FilterIsTypedLiveKeptByEnterAndClearedByEscape) {
  TopUi ui;
  const auto rows = Rows();
  HandleKey(ui, '/', rows);
  EXPECT_EQ(ui.prompt, TopUi::Prompt::kFilter);
  Type(ui, "trx", rows);
  HandleKey(ui, kKeyBackspace, rows);
  EXPECT_EQ(ui.filter, "tr");
  // 'q' while typing is text, not quit.
  EXPECT_EQ(HandleKey(ui, 'q', rows).kind, KeyAction::Kind::kNone);
  HandleKey(ui, kKeyEnter, rows);
  EXPECT_EQ(ui.prompt, TopUi::Prompt::kNone);
  EXPECT_EQ(ui.filter, "trq");
  HandleKey(ui, '/', rows);
  EXPECT_EQ(ui.input, "trq");  // edits the filter in place
  HandleKey(ui, kKeyEscape, rows);
  EXPECT_EQ(ui.filter, "");
}

TEST(TopKeysTest, SelectionMovesByGroupAndPauseOrResumesIt) {
  TopUi ui;
  const auto rows = Rows();
  EXPECT_EQ(SelectedIndex(ui, rows), 0);
  EXPECT_EQ(SelectedIndex(ui, {}), -1);
  HandleKey(ui, kKeyDown, rows);
  EXPECT_EQ(ui.selected, "b");
  HandleKey(ui, kKeyDown, rows);
  EXPECT_EQ(ui.selected, "c");  // past b's second GPU
  HandleKey(ui, kKeyDown, rows);
  EXPECT_EQ(ui.selected, "c");
  KeyAction a = HandleKey(ui, 'p', rows);
  EXPECT_EQ(a.kind, KeyAction::Kind::kResume);  // c is paused
  EXPECT_EQ(a.group, "c");
  HandleKey(ui, kKeyUp, rows);
  HandleKey(ui, kKeyUp, rows);
  EXPECT_EQ(ui.selected, "a");
  a = HandleKey(ui, 'p', rows);
  EXPECT_EQ(a.kind, KeyAction::Kind::kPause);
  EXPECT_EQ(a.group, "a");
  ui = TopUi{};
  EXPECT_EQ(HandleKey(ui, 'p', {}).kind, KeyAction::Kind::kNone);
  EXPECT_EQ(ui.status, "no group selected");
}

TEST(TopKeysTest, LimitPromptSendsAPercentOrSaysWhatIsWrong) {
  TopUi ui;
  const auto rows = Rows();
  HandleKey(ui, 'j', rows);
  HandleKey(ui, 'l', rows);
  EXPECT_EQ(ui.prompt, TopUi::Prompt::kLimit);
  Type(ui, "35", rows);
  KeyAction a = HandleKey(ui, kKeyEnter, rows);
  EXPECT_EQ(a.kind, KeyAction::Kind::kSetLimit);
  EXPECT_EQ(a.group, "b");
  EXPECT_EQ(a.percent, 35);
  EXPECT_EQ(ui.prompt, TopUi::Prompt::kNone);

  for (const char* bad : {"0", "101", "5x", ""}) {
    HandleKey(ui, 'l', rows);
    Type(ui, bad, rows);
    a = HandleKey(ui, kKeyEnter, rows);
    EXPECT_EQ(a.kind, KeyAction::Kind::kNone) << bad;
    EXPECT_NE(ui.status.find("is not a percent"), std::string::npos) << bad;
  }
  HandleKey(ui, 'l', rows);
  Type(ui, "50", rows);
  EXPECT_EQ(HandleKey(ui, kKeyEscape, rows).kind, KeyAction::Kind::kNone);
  EXPECT_EQ(ui.prompt, TopUi::Prompt::kNone);
  EXPECT_EQ(ui.filter, "");  // Esc on the limit prompt leaves the filter alone
}

}  // namespace
}  // namespace gpuslice::cli::top
