#include "cli/preload_env.h"

namespace gpuslice::cli {

std::string PrependPreload(std::string_view existing, std::string_view library) {
  std::string out(library);
  size_t start = 0;
  while (start <= existing.size()) {
    size_t end = existing.find_first_of(": \t", start);
    if (end == std::string_view::npos) end = existing.size();
    const std::string_view entry = existing.substr(start, end - start);
    if (!entry.empty() && entry != library) {
      out += ':';
      out += entry;
    }
    start = end + 1;
  }
  return out;
}

}  // namespace gpuslice::cli
