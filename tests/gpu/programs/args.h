// Flag parsing and JSON output shared by the gpu tier's CUDA programs.
// Flags are `--name value`; every program prints exactly one JSON object on
// one line of stdout (the result), diagnostics go to stderr.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace gpuslice::gpu_tier {

// The value after `--name`, or `fallback` when absent.
inline std::string Flag(int argc, char** argv, const char* name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i][0] == '-' && argv[i][1] == '-' && strcmp(argv[i] + 2, name) == 0) {
      return argv[i + 1];
    }
  }
  return fallback;
}

// A byte quantity: digits with an optional K/M/G suffix (powers of 1024).
inline unsigned long long Bytes(const std::string& text) {
  char* end = nullptr;
  unsigned long long n = strtoull(text.c_str(), &end, 10);
  switch (end != nullptr ? *end : '\0') {
    case 'K':
    case 'k':
      return n << 10;
    case 'M':
    case 'm':
      return n << 20;
    case 'G':
    case 'g':
      return n << 30;
    default:
      return n;
  }
}

inline double Number(const std::string& text) { return strtod(text.c_str(), nullptr); }

}  // namespace gpuslice::gpu_tier
