#include "shm/segment_os.h"

#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

namespace gpuslice {
namespace {

class RealSegmentOs final : public SegmentOs {
 public:
  constexpr RealSegmentOs() = default;
  int Open(const char* path, int flags, mode_t mode) override { return open(path, flags, mode); }
  int Close(int fd) override { return close(fd); }
  int Fstat(int fd, struct stat* st) override { return fstat(fd, st); }
  int Fchmod(int fd, mode_t mode) override { return fchmod(fd, mode); }
  int Ftruncate(int fd, off_t size) override { return ftruncate(fd, size); }
  int Flock(int fd, int operation) override { return flock(fd, operation); }
  int FcntlLock(int fd, int cmd, struct flock* lock) override { return fcntl(fd, cmd, lock); }
  void* Mmap(size_t size, int prot, int fd) override {
    return mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  }
  int Munmap(void* addr, size_t size) override { return munmap(addr, size); }
  int Mkdir(const char* path, mode_t mode) override { return mkdir(path, mode); }
  int Chmod(const char* path, mode_t mode) override { return chmod(path, mode); }
  int Unlink(const char* path) override { return unlink(path); }
};

}  // namespace

SegmentOs& SegmentOs::Real() {
  static RealSegmentOs os;  // constant-initialised, trivially destroyed
  return os;
}

}  // namespace gpuslice
