// A group segment's shared fields and byte locks, as the segment and its
// views (memory_ledger.h, compute_schedule.h, compute_usage.h,
// control_role.h) touch them; not for other code.
//
// Every field of GroupSegmentLayout may be written by any member at any
// time: it is only ever touched through std::atomic_ref.
#pragma once

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "gpuslice/group_segment.h"
#include "shm/segment_os.h"

namespace gpuslice::segment_fields {

template <typename T>
std::atomic_ref<T> Atomic(T& field) {
  return std::atomic_ref<T>(field);
}

template <typename T>
T Load(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load(std::memory_order_acquire);
}

// Raises `field` to `value` if that is higher.
inline void RaiseTo(uint64_t& field, uint64_t value) {
  auto f = Atomic(field);
  uint64_t seen = f.load(std::memory_order_relaxed);
  while (value > seen && !f.compare_exchange_weak(seen, value, std::memory_order_acq_rel)) {
  }
}

// Subtracts up to `bytes` from `count` (never below 0); returns what it took.
inline uint64_t TakeAtMost(uint64_t& count, uint64_t bytes) {
  auto c = Atomic(count);
  uint64_t seen = c.load(std::memory_order_relaxed);
  uint64_t taken = 0;
  do {
    taken = std::min(bytes, seen);
  } while (!c.compare_exchange_weak(seen, seen - taken, std::memory_order_acq_rel));
  return taken;
}

// OFD lock on one byte at `offset`: F_WRLCK to take (non-blocking unless
// `wait`), F_UNLCK to drop. Returns 0 or an errno value.
inline int OfdLock(SegmentOs& os, int fd, int64_t offset, short type, bool wait) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = offset;
  fl.l_len = 1;
  while (os.FcntlLock(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

// True if another open file description holds a lock on the byte at `offset`
// that conflicts with taking it as `type` (F_WRLCK: any lock; F_RDLCK: a write lock).
inline bool LockedByOther(SegmentOs& os, int fd, int64_t offset, short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = offset;
  fl.l_len = 1;
  if (os.FcntlLock(fd, F_OFD_GETLK, &fl) != 0) return true;  // unknown: assume alive
  return fl.l_type != F_UNLCK;
}

// "what: <strerror(err)>".
inline std::string ErrnoText(const std::string& what, int err) {
  return what + ": " + strerror(err);
}

// After a change to the limits, grants, turns or `paused`: recomputes
// compute_limited, bumps change_word and wakes its waiters
// (compute_schedule.cc).
void SignalChange(GroupSegmentLayout& layout);

}  // namespace gpuslice::segment_fields
