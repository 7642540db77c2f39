// FaultySegmentOs: a SegmentOs (segment_os.h) that passes every call to
// another one and fails the calls a test names, with the errno it names
// (LevelDB's ErrorEnv is the model). It counts the descriptors and mappings
// the segment holds, so a test sees what a failure left behind.
//
// Cleanup calls (Close, Munmap) always go through: they are what a failure
// path runs. Thread-compatible (one test thread).
#pragma once

#include <sys/mman.h>

#include <array>
#include <cerrno>
#include <cstddef>

#include "shm/segment_os.h"

namespace gpuslice {

class FaultySegmentOs final : public SegmentOs {
 public:
  enum class Call : size_t {
    kOpen,
    kFstat,
    kFchmod,
    kFtruncate,
    kFlock,
    kFcntlLock,
    kMmap,
    kMkdir,
    kChmod,
    kUnlink,
    kCount
  };

  explicit FaultySegmentOs(SegmentOs& base = SegmentOs::Real()) : base_(base) {}

  // The `nth` call of `call` from now (0: the next one) fails with `error`.
  void FailAt(Call call, int nth, int error) {
    Fault& f = faults_[static_cast<size_t>(call)];
    f.countdown = nth;
    f.error = error;
  }
  // Calls of `call` made so far, and failures injected in all.
  int calls(Call call) const { return calls_[static_cast<size_t>(call)]; }
  int injected() const { return injected_; }
  // Descriptors opened and not closed; mappings made and not unmapped.
  int open_fds() const { return open_fds_; }
  int mappings() const { return mappings_; }

  int Open(const char* path, int flags, mode_t mode) override {
    if (Failing(Call::kOpen)) return -1;
    const int fd = base_.Open(path, flags, mode);
    if (fd >= 0) ++open_fds_;
    return fd;
  }
  int Close(int fd) override {
    --open_fds_;
    return base_.Close(fd);
  }
  int Fstat(int fd, struct stat* st) override {
    return Failing(Call::kFstat) ? -1 : base_.Fstat(fd, st);
  }
  int Fchmod(int fd, mode_t mode) override {
    return Failing(Call::kFchmod) ? -1 : base_.Fchmod(fd, mode);
  }
  int Ftruncate(int fd, off_t size) override {
    return Failing(Call::kFtruncate) ? -1 : base_.Ftruncate(fd, size);
  }
  int Flock(int fd, int operation) override {
    return Failing(Call::kFlock) ? -1 : base_.Flock(fd, operation);
  }
  int FcntlLock(int fd, int cmd, struct flock* lock) override {
    return Failing(Call::kFcntlLock) ? -1 : base_.FcntlLock(fd, cmd, lock);
  }
  void* Mmap(size_t size, int prot, int fd) override {
    if (Failing(Call::kMmap)) return MAP_FAILED;
    void* p = base_.Mmap(size, prot, fd);
    if (p != MAP_FAILED) ++mappings_;
    return p;
  }
  int Munmap(void* addr, size_t size) override {
    --mappings_;
    return base_.Munmap(addr, size);
  }
  int Mkdir(const char* path, mode_t mode) override {
    return Failing(Call::kMkdir) ? -1 : base_.Mkdir(path, mode);
  }
  int Chmod(const char* path, mode_t mode) override {
    return Failing(Call::kChmod) ? -1 : base_.Chmod(path, mode);
  }
  int Unlink(const char* path) override { return Failing(Call::kUnlink) ? -1 : base_.Unlink(path); }

 private:
  struct Fault {
    int countdown = -1;  // -1: none armed
    int error = 0;
  };
  // Counts the call; true (errno set) when it is the one to fail.
  bool Failing(Call call) {
    const auto i = static_cast<size_t>(call);
    ++calls_[i];
    Fault& f = faults_[i];
    if (f.countdown < 0) return false;
    if (f.countdown-- > 0) return false;
    errno = f.error;
    ++injected_;
    return true;
  }

  SegmentOs& base_;
  std::array<Fault, static_cast<size_t>(Call::kCount)> faults_{};
  std::array<int, static_cast<size_t>(Call::kCount)> calls_{};
  int injected_ = 0;
  int open_fds_ = 0;
  int mappings_ = 0;
};

}  // namespace gpuslice
