#include "common/process.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpuslice {
namespace {

// Reads /proc/<pid>/<file> into buf; returns bytes read or -1. No allocation.
ssize_t ReadProcFile(pid_t pid, const char* file, char* buf, size_t size) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", static_cast<int>(pid), file);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n >= 0) buf[n] = '\0';
  return n;
}

// Parses state and start time out of /proc/<pid>/stat. The comm field may hold
// spaces and parentheses, so fields are counted from the last ')'.
bool ReadStat(pid_t pid, char* state, uint64_t* start_time) {
  char buf[1024];
  if (ReadProcFile(pid, "stat", buf, sizeof buf) <= 0) return false;
  const char* p = strrchr(buf, ')');
  if (p == nullptr || p[1] == '\0') return false;
  p += 2;  // now at field 3 (state)
  *state = *p;
  for (int field = 3; field < 22; ++field) {
    p = strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  *start_time = strtoull(p, nullptr, 10);
  return true;
}

}  // namespace

uint64_t ProcessStartTime(pid_t pid) {
  char state;
  uint64_t start = 0;
  return ReadStat(pid, &state, &start) ? start : 0;
}

bool ProcessAlive(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  char state;
  uint64_t start = 0;
  if (!ReadStat(pid, &state, &start)) return false;
  if (state == 'Z' || state == 'X') return false;
  return start_time == 0 || start == start_time;
}

void ProcessName(pid_t pid, char* out, size_t size) {
  if (size == 0) return;
  out[0] = '\0';
  char buf[64];
  ssize_t n = ReadProcFile(pid, "comm", buf, sizeof buf);
  if (n <= 0) return;
  if (buf[n - 1] == '\n') buf[n - 1] = '\0';
  snprintf(out, size, "%s", buf);
}

}  // namespace gpuslice
