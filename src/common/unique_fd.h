// UniqueFd: a file descriptor closed when it goes out of scope (-1: none).
// Header-only and without globals, so the preloaded limiter may use it.
#pragma once

#include <unistd.h>

namespace gpuslice {

class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace gpuslice
