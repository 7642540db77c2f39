// Shared helpers for the libFuzzer targets in tests/fuzz (docs/fuzzing.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::fuzz {

// The input cut at every `sep` byte (seed files stay readable text).
inline std::vector<std::string> Split(const uint8_t* data, size_t size, char sep) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < size; ++i) {
    if (static_cast<char>(data[i]) == sep) {
      out.emplace_back();
    } else {
      out.back().push_back(static_cast<char>(data[i]));
    }
  }
  return out;
}

// A broken property: print it and abort, so libFuzzer records the input.
[[noreturn]] inline void Fail(const char* what, std::string_view detail) {
  fprintf(stderr, "fuzz property violated: %s: %.*s\n", what, static_cast<int>(detail.size()),
          detail.data());
  abort();
}

// True if `s` holds no control character (a one-line message).
inline bool OneLine(std::string_view s) {
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

}  // namespace gpuslice::fuzz
