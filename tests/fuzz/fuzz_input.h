// Shared helpers for the libFuzzer targets in tests/fuzz (docs/fuzzing.md).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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

// A private directory under $TMPDIR for the life of the process (hold it in a
// function-local static): removed at exit.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path().string() + "/" + name + "." +
              std::to_string(getpid())) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace gpuslice::fuzz
