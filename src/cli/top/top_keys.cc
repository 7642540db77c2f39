#include "cli/top/top_keys.h"

#include <cctype>

namespace gpuslice::cli::top {
namespace {

KeyAction Prompted(TopUi& ui, int key, const std::vector<GroupRow>& rows) {
  if (key == kKeyEscape) {
    if (ui.prompt == TopUi::Prompt::kFilter) ui.filter.clear();
    ui.prompt = TopUi::Prompt::kNone;
    ui.input.clear();
    return {};
  }
  if (key == kKeyBackspace || key == 127 || key == 8) {
    if (!ui.input.empty()) ui.input.pop_back();
  } else if (key == kKeyEnter || key == '\r') {
    const TopUi::Prompt prompt = ui.prompt;
    ui.prompt = TopUi::Prompt::kNone;
    std::string input = std::move(ui.input);
    ui.input.clear();
    if (prompt == TopUi::Prompt::kFilter) return {};
    const int i = SelectedIndex(ui, rows);
    if (i < 0) {
      ui.status = "no group selected";
      return {};
    }
    const std::string& group = rows[i].group.group;
    int percent = 0;
    bool digits = !input.empty() && input.size() <= 3;
    for (char c : input) {
      digits = digits && std::isdigit(static_cast<unsigned char>(c)) != 0;
      if (digits) percent = percent * 10 + (c - '0');
    }
    if (!digits || percent < 1 || percent > 100) {
      ui.status = "compute limit of " + group + ": '" + input + "' is not a percent 1..100";
      return {};
    }
    return {KeyAction::Kind::kSetLimit, group, percent};
  } else if (key >= 32 && key < 127) {
    ui.input += static_cast<char>(key);
  }
  if (ui.prompt == TopUi::Prompt::kFilter) ui.filter = ui.input;  // live as typed
  return {};
}

}  // namespace

int SelectedIndex(const TopUi& ui, const std::vector<GroupRow>& rows) {
  if (rows.empty()) return -1;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].group.group == ui.selected) return static_cast<int>(i);
  }
  return 0;
}

KeyAction HandleKey(TopUi& ui, int key, const std::vector<GroupRow>& rows) {
  if (ui.prompt != TopUi::Prompt::kNone) return Prompted(ui, key, rows);
  const int i = SelectedIndex(ui, rows);
  switch (key) {
    case 'q':
    case 'Q':
      return {KeyAction::Kind::kQuit, "", 0};
    case 's':
      ui.sort = NextSortKey(ui.sort);
      ui.status = std::string("sorted by ") + SortKeyName(ui.sort);
      return {};
    case '/':
      ui.prompt = TopUi::Prompt::kFilter;
      ui.input = ui.filter;
      return {};
    case kKeyUp:
    case 'k':
      if (i > 0) ui.selected = rows[i - 1].group.group;
      return {};
    case kKeyDown:
    case 'j': {
      // Rows of one group on several GPUs are adjacent when sorted by group:
      // move to the next group.
      for (size_t n = i + 1; i >= 0 && n < rows.size(); ++n) {
        if (rows[n].group.group != rows[i].group.group) {
          ui.selected = rows[n].group.group;
          break;
        }
      }
      return {};
    }
    case kKeyEnter:
    case '\r':
    case 't':
      ui.show_tenants = !ui.show_tenants;
      return {};
    case 'p':
      if (i < 0) {
        ui.status = "no group selected";
        return {};
      }
      return {
          rows[i].state == GroupState::kPaused ? KeyAction::Kind::kResume : KeyAction::Kind::kPause,
          rows[i].group.group, 0};
    case 'l':
      if (i < 0) {
        ui.status = "no group selected";
        return {};
      }
      ui.selected = rows[i].group.group;
      ui.prompt = TopUi::Prompt::kLimit;
      ui.input.clear();
      return {};
    default:
      return {};
  }
}

}  // namespace gpuslice::cli::top
