// How `gpuslice top` shows a TopModel: PlainFrame, one plain table per
// sample (a dumb terminal, a pipe, --plain: like `nvidia-smi -l`), and
// CursesView, the live full-screen view (ncurses) that redraws on resize.
//
// Thread-compatible; one CursesView per process (ncurses is global).
#pragma once

#include <string>
#include <vector>

#include "cli/top/top_keys.h"
#include "cli/top/top_model.h"

namespace gpuslice::cli::top {

// The text of one cell of the group table (shared by both views).
struct GroupCells {
  std::string group, gpu, limit, request, grant, share, memory, members, state;
};
GroupCells CellsOf(const GroupRow& row);

// One sample as plain text: a header line (time, source), the GPU table (one
// line per GPU with its share bar as letters, a legend after it), the group
// table (sorted and filtered as `ui` says, ASCII sparklines) and, when
// `ui.show_tenants`, every group's tenants. Ends with a blank line.
std::string PlainFrame(const TopModel& model, const TopUi& ui);

class CursesView {
 public:
  CursesView() = default;
  ~CursesView();
  CursesView(const CursesView&) = delete;
  CursesView& operator=(const CursesView&) = delete;

  // Takes the terminal (raw keys, no echo, hidden cursor, colours if any).
  void Start();
  // Gives the terminal back as it was (also done by the destructor).
  void Stop();

  // Redraws the whole screen at its current size.
  void Draw(const TopModel& model, const TopUi& ui);

  // The next key within `timeout_ms` (top_keys.h codes), kNoKey if none came,
  // kResized when the terminal changed size (the caller redraws).
  static constexpr int kNoKey = -1;
  static constexpr int kResized = -2;
  int ReadKey(int timeout_ms);

 private:
  bool started_ = false;
  bool utf8_ = false;
  bool colour_ = false;
};

}  // namespace gpuslice::cli::top
