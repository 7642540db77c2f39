// For tests that inspect or damage what no GroupSegment call shows (the
// header, the ledger lock's words, a slot's raw counters): the layout of a
// segment's file, mapped a second time. The mapping is shared with every
// handle's, so what a test writes there is what the segment sees. Not for
// product code: readers go through GroupSegment.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <utility>

#include "shm/group_segment.h"

namespace gpuslice::testing {

// The layout in `segment`'s file as it is now (one mapping per file, by
// device and inode, kept for the test process's life). Aborts if the file
// cannot be mapped: a test that asks has a segment.
inline GroupSegmentLayout& RawLayout(const GroupSegment& segment) {
  static std::map<std::pair<dev_t, ino_t>, GroupSegmentLayout*> mapped;
  const int fd = open(segment.path().c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) abort();
  struct stat st {};
  if (fstat(fd, &st) != 0) abort();
  GroupSegmentLayout*& layout = mapped[{st.st_dev, st.st_ino}];
  if (layout == nullptr) {
    void* p = mmap(nullptr, sizeof(GroupSegmentLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) abort();
    layout = static_cast<GroupSegmentLayout*>(p);
  }
  close(fd);
  return *layout;
}

// The raw budget fields of device `dev` (a test that stages a state; code
// uses ComputeUsage::Budget).
inline DeviceCompute& RawCompute(const GroupSegment& segment, int dev) {
  return RawLayout(segment).devices[dev].compute;
}

}  // namespace gpuslice::testing
