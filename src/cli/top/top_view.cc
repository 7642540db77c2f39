#include "cli/top/top_view.h"

#include <curses.h>
#include <langinfo.h>

#include <algorithm>
#include <clocale>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>

#include "common/quantity.h"

namespace gpuslice::cli::top {
namespace {

constexpr size_t kSparkWidth = 16;
constexpr int kBarWidth = 30;

std::string Percent(const std::optional<double>& v, int decimals = 0) {
  if (!v) return "-";
  char text[32];
  snprintf(text, sizeof text, "%.*f%%", decimals, *v);
  return text;
}

std::string Bytes(uint64_t b) {
  std::string s = FormatBytes(b);
  std::erase(s, ' ');
  return s;
}

// A GPU no daemon named: the first hex digits of its UUID.
std::string UuidTag(const std::string& uuid) {
  return (uuid.starts_with("GPU-") ? uuid.substr(4) : uuid).substr(0, 6);
}

std::string GpuName(const GpuInfo& g) {
  return g.index >= 0 ? std::to_string(g.index) : UuidTag(g.uuid);
}

std::string ClockText(int64_t realtime_ns) {
  const auto t = static_cast<time_t>(realtime_ns / 1'000'000'000);
  tm local{};
  localtime_r(&t, &local);
  char text[32];
  strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

std::string Line(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Line(const char* format, ...) {
  char text[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof text, format, args);
  va_end(args);
  return text;
}

// The GPU line's cells: util, memory, power.
struct GpuCells {
  std::string util, memory, power;
};
GpuCells CellsOf(const GpuInfo& g) {
  GpuCells c;
  c.util = Percent(g.util_percent);
  c.memory =
      g.memory_used && g.memory_total ? Bytes(*g.memory_used) + "/" + Bytes(*g.memory_total) : "-";
  c.power = g.power_watts ? Line("%.0fW", *g.power_watts) : std::string("-");
  if (g.power_watts && g.power_limit_watts) c.power += Line("/%.0fW", *g.power_limit_watts);
  return c;
}

// Letters of the share bars: each group its own, in the order groups first
// appear by id.
std::map<std::string, char> Letters(const TopModel& model) {
  std::map<std::string, char> letters;
  for (const GroupOnGpu& g : model.sample().groups) letters.emplace(g.group, 0);
  char next = 'A';
  for (auto& [group, letter] : letters) {
    letter = next;
    next = next == 'Z' ? 'a' : next == 'z' ? '#' : static_cast<char>(next + 1);
  }
  return letters;
}

constexpr const char* kGroupHeader = "%-20s %-6s %-6s %-7s %-6s %-7s %-16s %-19s %-7s %s";

}  // namespace

GroupCells CellsOf(const GroupRow& row) {
  const GroupOnGpu& g = row.group;
  GroupCells c;
  c.group = g.group;
  c.gpu = g.gpu_index >= 0 ? std::to_string(g.gpu_index) : UuidTag(g.uuid);
  c.limit = g.compute_limit ? std::to_string(*g.compute_limit) + "%" : "-";
  c.request = Percent(g.request_percent);
  c.grant = Percent(g.grant_percent);
  c.share = Percent(g.share_percent, 1);
  c.memory = Bytes(g.memory_used) + "/" + (g.memory_limit ? Bytes(*g.memory_limit) : "-");
  c.members = std::to_string(g.members);
  c.state = StateName(row.state);
  return c;
}

// A MIG instance's line under its GPU: profile, memory used/total, owner.
std::string MigLine(const MigSlot& m) {
  return Line(
      "  MIG %-9s mem %-19s %s", m.profile.c_str(),
      ((m.memory_used ? Bytes(*m.memory_used) : std::string("-")) + "/" + Bytes(m.memory_total))
          .c_str(),
      m.owner.empty() ? "(not gpusliced's)" : m.owner.c_str());
}

std::string PlainFrame(const TopModel& model, const TopUi& ui) {
  const Sample& s = model.sample();
  std::string out = "gpuslice top  " + ClockText(s.at_ns) + "  " + model.SourceLine() + "\n";
  const auto letters = Letters(model);
  out +=
      Line("%-6s %-24s %-6s %-21s %-12s %s\n", "GPU", "NAME", "UTIL", "MEMORY", "POWER", "SHARES");
  for (const GpuInfo& gpu : s.gpus) {
    const GpuCells c = CellsOf(gpu);
    std::string bar = "[";
    std::string legend;
    int used = 0;
    for (const auto& [group, cells] : ShareBar(model.RowsOnGpu(gpu.uuid), kBarWidth)) {
      bar.append(cells, letters.at(group));
      used += cells;
      legend += Line(" %c=%s", letters.at(group), group.c_str());
    }
    bar.append(kBarWidth - std::min(used, kBarWidth), '.');
    const auto markers = RequestMarkers(model.RowsOnGpu(gpu.uuid), kBarWidth);
    for (const auto& [group, cell] : markers) bar[1 + cell] = '|';
    if (!markers.empty()) legend += " |=request";
    bar += "]";
    out += Line("%-6s %-24s %-6s %-21s %-12s %s%s\n", GpuName(gpu).c_str(),
                (gpu.name.empty() ? "-" : gpu.name.substr(0, 24)).c_str(), c.util.c_str(),
                c.memory.c_str(), c.power.c_str(), bar.c_str(), legend.c_str());
    for (const MigSlot& m : gpu.mig) out += MigLine(m) + "\n";
  }
  const std::vector<GroupRow> rows = model.Rows(ui.sort, ui.filter);
  out += Line(kGroupHeader, "GROUP", "GPU", "LIMIT", "REQUEST", "GRANT", "SHARE", "HISTORY",
              "MEMORY", "MEMBERS", "STATE");
  out += "\n";
  for (const GroupRow& r : rows) {
    const GroupCells c = CellsOf(r);
    out += Line(kGroupHeader, c.group.c_str(), c.gpu.c_str(), c.limit.c_str(), c.request.c_str(),
                c.grant.c_str(), c.share.c_str(),
                Sparkline(r.history, kSparkWidth, /*ascii=*/true).c_str(), c.memory.c_str(),
                c.members.c_str(), c.state.c_str());
    out += "\n";
  }
  if (rows.empty())
    out += ui.filter.empty() ? "no groups\n" : "no group matches '" + ui.filter + "'\n";
  if (ui.show_tenants) {
    out += Line("%-20s %-9s %-28s %-10s %s\n", "GROUP", "PID", "NAME", "MEMORY", "SHARE");
    std::vector<std::string> seen;
    for (const GroupRow& r : rows) {
      if (std::find(seen.begin(), seen.end(), r.group.group) != seen.end()) continue;
      seen.push_back(r.group.group);
      for (const TenantInfo& t : model.TenantsOf(r.group.group)) {
        out += Line("%-20s %-9d %-28s %-10s %s\n", t.group.c_str(), t.pid,
                    (t.name.empty() ? "-" : t.name).c_str(), Bytes(t.memory_used).c_str(),
                    Percent(t.share_percent, 1).c_str());
      }
    }
  }
  out += "\n";
  return out;
}

// ---- ncurses ----

namespace {

enum Pair : short { kHeader = 1, kSelected, kPaused, kThrottled, kWarn, kFirstGroup };
constexpr short kGroupColours = 6;

// Writes `text` (UTF-8) at (y, x), cut at column `max_x`: counted in
// characters, so that multibyte sparklines are not cut short.
void Put(int y, int x, const std::string& text, int max_x) {
  if (y < 0 || y >= LINES || x >= max_x) return;
  std::wstring wide(text.size(), L'\0');
  const size_t n = mbstowcs(wide.data(), text.c_str(), wide.size());
  if (n == static_cast<size_t>(-1)) {  // not valid in this locale: as bytes
    mvaddnstr(y, x, text.c_str(), max_x - x);
    return;
  }
  wide.resize(n);
  mvaddnwstr(y, x, wide.c_str(), max_x - x);
}

}  // namespace

CursesView::~CursesView() { Stop(); }

void CursesView::Start() {
  if (started_) return;
  setlocale(LC_ALL, "");
  utf8_ = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
  initscr();
  cbreak();
  noecho();
  keypad(stdscr, TRUE);
  set_escdelay(25);
  curs_set(0);
  colour_ = has_colors();
  if (colour_) {
    start_color();
    use_default_colors();
    init_pair(kHeader, COLOR_BLACK, COLOR_CYAN);
    init_pair(kSelected, COLOR_BLACK, COLOR_WHITE);
    init_pair(kPaused, COLOR_YELLOW, -1);
    init_pair(kThrottled, COLOR_RED, -1);
    init_pair(kWarn, COLOR_WHITE, COLOR_RED);
    const short colours[kGroupColours] = {COLOR_GREEN, COLOR_BLUE,   COLOR_MAGENTA,
                                          COLOR_CYAN,  COLOR_YELLOW, COLOR_RED};
    for (short i = 0; i < kGroupColours; ++i)
      init_pair(static_cast<short>(kFirstGroup + i), COLOR_BLACK, colours[i]);
  }
  started_ = true;
}

void CursesView::Stop() {
  if (!started_) return;
  endwin();
  started_ = false;
}

int CursesView::ReadKey(int timeout_ms) {
  timeout(std::max(0, timeout_ms));
  const int key = getch();
  switch (key) {
    case ERR:
      return kNoKey;
    case KEY_RESIZE:
      return kResized;
    case KEY_UP:
      return kKeyUp;
    case KEY_DOWN:
      return kKeyDown;
    case KEY_ENTER:
      return kKeyEnter;
    case KEY_BACKSPACE:
      return kKeyBackspace;
    default:
      return key;
  }
}

void CursesView::Draw(const TopModel& model, const TopUi& ui) {
  erase();
  const int w = COLS;
  const int h = LINES;
  int y = 0;
  const Sample& s = model.sample();
  // Header: the title and the source; in red while the daemon is gone.
  const attr_t header = colour_ ? COLOR_PAIR(model.daemon_lost() ? kWarn : kHeader) : A_REVERSE;
  attron(header);
  mvhline(y, 0, ' ', w);
  Put(y, 0, "gpuslice top  " + ClockText(s.at_ns) + "  " + model.SourceLine(), w);
  attroff(header);
  y += 2;

  const auto letters = Letters(model);
  std::map<std::string, short> colour_of;
  for (const auto& [group, letter] : letters) {
    colour_of[group] = static_cast<short>(kFirstGroup + (colour_of.size() % kGroupColours));
  }
  // GPUs: a line each, then its share bar split by group.
  for (const GpuInfo& gpu : s.gpus) {
    if (y >= h - 3) break;
    const GpuCells c = CellsOf(gpu);
    Put(y++, 0,
        Line("GPU %-6s %-24s util %-5s mem %-19s power %s", GpuName(gpu).c_str(),
             (gpu.name.empty() ? "-" : gpu.name.substr(0, 24)).c_str(), c.util.c_str(),
             c.memory.c_str(), c.power.c_str()),
        w);
    const int bar = std::max(10, std::min(w - 12, 60));
    int x = 1;
    Put(y, 0, "[", w);
    int used = 0;
    std::string legend;
    for (const auto& [group, cells] : ShareBar(model.RowsOnGpu(gpu.uuid), bar)) {
      const char letter = letters.at(group);
      if (colour_) attron(COLOR_PAIR(colour_of[group]));
      for (int i = 0; i < cells && x + i < w; ++i) mvaddch(y, x + i, letter);
      if (colour_) attroff(COLOR_PAIR(colour_of[group]));
      x += cells;
      used += cells;
      legend += Line(" %c=%s", letter, group.c_str());
    }
    for (; used < bar && x < w; ++used) mvaddch(y, x++, '.');
    // Each group's request: a bold '|' in its colour where its block would
    // end at its request.
    const auto markers = RequestMarkers(model.RowsOnGpu(gpu.uuid), bar);
    for (const auto& [group, cell] : markers) {
      if (1 + cell >= w) continue;
      const attr_t a = A_BOLD | (colour_ ? COLOR_PAIR(colour_of[group]) : A_NORMAL);
      attron(a);
      mvaddch(y, 1 + cell, '|');
      attroff(a);
    }
    if (!markers.empty()) legend += " |=request";
    Put(y, x, "]" + legend, w);
    ++y;
    for (const MigSlot& m : gpu.mig) {
      if (y >= h - 3) break;
      Put(y++, 0, MigLine(m), w);
    }
    ++y;
  }

  // Groups.
  const std::vector<GroupRow> rows = model.Rows(ui.sort, ui.filter);
  const int selected = SelectedIndex(ui, rows);
  attron(A_BOLD);
  Put(y++, 0,
      Line(kGroupHeader, "GROUP", "GPU", "LIMIT", "REQUEST", "GRANT", "SHARE", "HISTORY", "MEMORY",
           "MEMBERS", "STATE"),
      w);
  attroff(A_BOLD);
  const int tenant_lines =
      ui.show_tenants && selected >= 0
          ? 3 + static_cast<int>(model.TenantsOf(rows[selected].group.group).size())
          : 0;
  const int room = std::max(1, h - 2 - y - tenant_lines);
  const int first = std::max(0, selected - room + 1);
  for (int i = first; i < static_cast<int>(rows.size()) && i < first + room && y < h - 2; ++i) {
    const GroupRow& r = rows[i];
    const GroupCells c = CellsOf(r);
    attr_t a = A_NORMAL;
    if (i == selected) a = colour_ ? COLOR_PAIR(kSelected) : A_REVERSE;
    if (colour_ && i != selected && r.state == GroupState::kPaused) a = COLOR_PAIR(kPaused);
    if (colour_ && i != selected && r.state == GroupState::kThrottled) a = COLOR_PAIR(kThrottled);
    attron(a);
    if (i == selected) mvhline(y, 0, ' ', w);
    // The sparkline is multibyte: pad it by characters, not bytes.
    std::string spark = Sparkline(r.history, kSparkWidth, !utf8_);
    const size_t chars = std::min(r.history.size(), kSparkWidth);
    spark.append(kSparkWidth - chars, ' ');
    Put(y++, 0,
        Line("%-20s %-6s %-6s %-7s %-6s %-7s ", c.group.c_str(), c.gpu.c_str(), c.limit.c_str(),
             c.request.c_str(), c.grant.c_str(), c.share.c_str()) +
            spark + Line(" %-19s %-7s %s", c.memory.c_str(), c.members.c_str(), c.state.c_str()),
        w);
    attroff(a);
  }
  if (rows.empty()) {
    Put(y++, 0, ui.filter.empty() ? "no groups" : "no group matches '" + ui.filter + "'", w);
  }
  if (ui.show_tenants && selected >= 0) {
    const std::string& group = rows[selected].group.group;
    ++y;
    attron(A_BOLD);
    Put(y++, 0,
        Line("tenants of %s:  %-9s %-28s %-10s %s", group.c_str(), "PID", "NAME", "MEMORY",
             "SHARE"),
        w);
    attroff(A_BOLD);
    const std::string indent(std::string("tenants of ").size() + group.size() + 3, ' ');
    for (const TenantInfo& t : model.TenantsOf(group)) {
      if (y >= h - 2) break;
      Put(y++, 0,
          indent + Line("%-9d %-28s %-10s %s", t.pid, (t.name.empty() ? "-" : t.name).c_str(),
                        Bytes(t.memory_used).c_str(), Percent(t.share_percent, 1).c_str()),
          w);
    }
  }

  // The prompt or the status line, then the keys.
  if (ui.prompt == TopUi::Prompt::kFilter) {
    Put(h - 2, 0, "filter (group contains): " + ui.input, w);
  } else if (ui.prompt == TopUi::Prompt::kLimit) {
    Put(h - 2, 0,
        "compute limit of " + ui.selected + " (percent, Enter sends, Esc cancels): " + ui.input, w);
  } else if (!ui.status.empty()) {
    Put(h - 2, 0, ui.status, w);
  }
  attron(A_REVERSE);
  mvhline(h - 1, 0, ' ', w);
  Put(h - 1, 0,
      std::string("sort: ") + SortKeyName(ui.sort) +
          (ui.filter.empty() ? "" : "  filter: " + ui.filter) +
          " | q quit  s sort  / filter  Up/Down select  Enter/t tenants  p pause/resume  l limit",
      w);
  attroff(A_REVERSE);
  refresh();
}

}  // namespace gpuslice::cli::top
