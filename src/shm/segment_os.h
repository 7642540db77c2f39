// SegmentOs: the system calls a group segment makes on its file and its
// directory (group_segment.h), behind one seam, so that a test can fail any
// of them at any point (FaultySegmentOs, faulty_segment_os.h) and check that
// the segment fails cleanly: a defined error, no descriptor or mapping left
// behind, nothing half-made that a later open would trust. LevelDB's Env and
// its tests' ErrorEnv are the model.
//
// Each call is the system call of its name with the same arguments and
// result: -1 (MAP_FAILED for Mmap) with errno set on failure. Real() is the
// process's own calls. Thread-safe as the system calls are.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>

namespace gpuslice {

class SegmentOs {
 public:
  virtual int Open(const char* path, int flags, mode_t mode) = 0;
  virtual int Close(int fd) = 0;
  virtual int Fstat(int fd, struct stat* st) = 0;
  virtual int Fchmod(int fd, mode_t mode) = 0;
  virtual int Ftruncate(int fd, off_t size) = 0;
  virtual int Flock(int fd, int operation) = 0;
  // fcntl(fd, cmd, lock) for the OFD byte locks (F_OFD_SETLK, F_OFD_SETLKW,
  // F_OFD_GETLK).
  virtual int FcntlLock(int fd, int cmd, struct flock* lock) = 0;
  // mmap(nullptr, size, prot, MAP_SHARED, fd, 0).
  virtual void* Mmap(size_t size, int prot, int fd) = 0;
  virtual int Munmap(void* addr, size_t size) = 0;
  virtual int Mkdir(const char* path, mode_t mode) = 0;
  virtual int Chmod(const char* path, mode_t mode) = 0;
  virtual int Unlink(const char* path) = 0;

  // The real calls; never destroyed (hooks may run during exit).
  static SegmentOs& Real();

 protected:
  SegmentOs() = default;
  ~SegmentOs() = default;  // not deleted through this type
  SegmentOs(const SegmentOs&) = default;
  SegmentOs& operator=(const SegmentOs&) = default;
};

}  // namespace gpuslice
