#include "sim/core/xid_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gpuslice::sim {

std::string XidLogPath(const std::string& state_path) { return state_path + ".xid"; }

Status AppendXid(const std::string& state_path, int device, uint32_t xid) {
  if (device < 0) return InvalidArgument("no device " + std::to_string(device));
  const std::string path = XidLogPath(state_path);
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return Internal("cannot open " + path + ": " + strerror(errno));
  char line[64];
  const int n = snprintf(line, sizeof line, "%d %u\n", device, xid);
  const ssize_t w = write(fd, line, static_cast<size_t>(n));
  const int err = errno;
  close(fd);
  if (w != n) return Internal("cannot append to " + path + ": " + strerror(err));
  return Status::Ok();
}

std::vector<XidRecord> ReadXids(const std::string& state_path, uint64_t from, uint64_t* next) {
  *next = from;
  std::vector<XidRecord> out;
  const int fd = open(XidLogPath(state_path).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  std::string text;
  char buf[4096];
  for (auto at = static_cast<off_t>(from);;) {
    const ssize_t n = pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  close(fd);
  size_t start = 0;
  for (size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', start)) {
    int device = -1;
    unsigned xid = 0;
    char tail = 0;
    const std::string line = text.substr(start, nl - start);
    if (sscanf(line.c_str(), "%d %u%c", &device, &xid, &tail) == 2 && device >= 0) {
      out.push_back({from + start, device, xid});
    }
    start = nl + 1;
  }
  *next = from + start;
  return out;
}

uint64_t XidLogSize(const std::string& state_path) {
  struct stat st {};
  if (stat(XidLogPath(state_path).c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace gpuslice::sim
