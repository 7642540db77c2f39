// The keys of `gpuslice top` as a state machine over what the view shows
// (TopUi) and what the command must do (KeyAction): sort, filter, select,
// tenants on demand, pause/resume, change a limit, quit. Pure: the command
// reads keys from the terminal and performs the actions, so every key is
// tested without one.
//
// Keys: q quits; s cycles the sort column; / starts a filter (typed text,
// Enter keeps it, Esc clears it); Up/Down (k/j) select a row; Enter or t
// shows/hides the selected group's tenants; p pauses/resumes the selected
// group; l prompts for its compute limit (1..100, Enter sends, Esc cancels).
//
// Thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "cli/top/top_model.h"

namespace gpuslice::cli::top {

// Key codes besides characters (the values of ncurses' KEY_* do not matter
// here: the view translates them).
inline constexpr int kKeyUp = 0x1001;
inline constexpr int kKeyDown = 0x1002;
inline constexpr int kKeyEnter = '\n';
inline constexpr int kKeyEscape = 27;
inline constexpr int kKeyBackspace = 0x1003;

struct TopUi {
  enum class Prompt { kNone, kFilter, kLimit };
  SortKey sort = SortKey::kGroup;
  std::string filter;
  std::string selected;  // group id of the selected row ("" : the first)
  bool show_tenants = false;
  Prompt prompt = Prompt::kNone;
  std::string input;   // what the prompt has so far
  std::string status;  // the status line (the last action's result or error)
};

struct KeyAction {
  enum class Kind { kNone, kQuit, kPause, kResume, kSetLimit };
  Kind kind = Kind::kNone;
  std::string group;
  int percent = 0;  // kSetLimit
};

// Applies `key` to `ui` given the rows now shown (sorted and filtered as
// `ui` says); what the command must do.
KeyAction HandleKey(TopUi& ui, int key, const std::vector<GroupRow>& rows);

// The index of the selected row in `rows` (0 when the selected group is not
// shown), or -1 when there are none.
int SelectedIndex(const TopUi& ui, const std::vector<GroupRow>& rows);

}  // namespace gpuslice::cli::top
