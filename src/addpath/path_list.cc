#include "addpath/path_list.h"

#include <algorithm>
#include <vector>

namespace gpuslice::addpath {
namespace {

// Appends the non-empty entries of `list` to `out`, in order.
void SplitInto(std::string_view list, std::string_view separators,
               std::vector<std::string_view>& out) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find_first_of(separators, start);
    if (end == std::string_view::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
}

}  // namespace

bool HasEntries(std::string_view list, std::string_view separators) {
  return list.find_first_not_of(separators) != std::string_view::npos;
}

std::string EditPathList(std::string_view current, std::string_view addition, EditMode mode,
                         std::string_view separators) {
  if (!HasEntries(addition, separators)) return std::string(current);

  // Candidate entries in priority order; the first occurrence of each wins.
  std::vector<std::string_view> entries;
  if (mode == EditMode::kPrepend) {
    SplitInto(addition, separators, entries);
    SplitInto(current, separators, entries);
  } else {
    SplitInto(current, separators, entries);
    SplitInto(addition, separators, entries);
  }

  // Mark duplicates: sort positions by (entry, position); within each run of
  // equal entries only the first (lowest) position is kept. O(n log n), so a
  // pathological 100 KB list of thousands of entries stays cheap.
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&entries](size_t a, size_t b) {
    int c = entries[a].compare(entries[b]);
    return c < 0 || (c == 0 && a < b);
  });
  std::vector<bool> keep(entries.size(), true);
  for (size_t i = 1; i < order.size(); ++i) {
    if (entries[order[i]] == entries[order[i - 1]]) keep[order[i]] = false;
  }

  size_t length = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (keep[i]) length += entries[i].size() + 1;
  }
  std::string result;
  result.reserve(length);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!keep[i]) continue;
    if (!result.empty()) result.push_back(':');
    result.append(entries[i]);
  }
  return result;
}

}  // namespace gpuslice::addpath
