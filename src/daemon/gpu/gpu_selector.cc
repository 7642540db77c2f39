#include "daemon/gpu/gpu_selector.h"

#include <algorithm>
#include <cctype>

#include "common/quantity.h"

namespace gpuslice::daemon {
namespace {

// isdigit/tolower take an unsigned char's value: a plain char above 0x7f is negative.
bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

StatusOr<std::vector<int>> ParseGpuSelector(std::string_view selector,
                                            const std::vector<std::string>& uuids,
                                            GpuSelectorRules rules) {
  const int count = static_cast<int>(uuids.size());
  std::vector<int> out;
  if (rules.allow_all && Trim(selector) == "all") {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  size_t start = 0;
  while (start <= selector.size()) {
    const size_t comma = std::min(selector.find(',', start), selector.size());
    const std::string_view item = Trim(selector.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) {
      return InvalidArgument("empty GPU id in \"" + std::string(selector) +
                             "\" (ids are an index, a UUID, a comma-separated list" +
                             (rules.allow_all ? ", or all)" : ")"));
    }
    int index = -1;
    if (AllDigits(item)) {
      index = item.size() <= 6 ? std::stoi(std::string(item)) : -1;
      if (index < 0 || index >= count) {
        return NotFound("no GPU " + std::string(item) + " (this node has " + std::to_string(count) +
                        " GPUs)");
      }
    } else {
      const std::string wanted = Lower(item);
      for (int i = 0; i < count && index < 0; ++i) {
        const std::string lower = Lower(uuids[static_cast<size_t>(i)]);
        if (lower == wanted || lower == "gpu-" + wanted) index = i;
      }
      if (index < 0) return NotFound("no GPU with UUID \"" + std::string(item) + "\"");
    }
    if (std::find(out.begin(), out.end(), index) != out.end()) {
      if (rules.reject_duplicates) {
        return InvalidArgument("GPU " + std::string(item) + " is listed twice");
      }
      continue;
    }
    out.push_back(index);
  }
  return out;
}

}  // namespace gpuslice::daemon
