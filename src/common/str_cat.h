// StrCat: pieces of text joined into one string, sized once.
//
// The way to build a message from literals and strings
// (StrCat({"'", name, "' is not a group"})): GCC 12 at -O2 and above warns
// falsely (-Wrestrict, -Warray-bounds, GCC bugs 105329 and 105651) on
// `"literal" + std::string(...)` once it is inlined, and CI builds with
// warnings as errors. Pure; thread-safe.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace gpuslice {

inline std::string StrCat(std::initializer_list<std::string_view> pieces) {
  size_t size = 0;
  for (std::string_view p : pieces) size += p.size();
  std::string out;
  out.reserve(size);
  for (std::string_view p : pieces) out.append(p);
  return out;
}

}  // namespace gpuslice
