#include "sim/mps/log_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/clock.h"

namespace gpuslice::sim::mps {

StatusOr<std::unique_ptr<LogFile>> LogFile::Open(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable("cannot open log file " + path + ": " + strerror(errno));
  return std::unique_ptr<LogFile>(new LogFile(fd));
}

LogFile::~LogFile() { close(fd_); }

void LogFile::Write(std::string_view who, std::string_view message) {
  const std::string line = FormatLogLine(RealtimeNs(), who, getpid(), message);
  if (write(fd_, line.data(), line.size()) < 0) {
    // Nowhere left to report it; the daemon goes on without its log.
  }
}

std::string FormatLogLine(int64_t realtime_ns, std::string_view who, int pid,
                          std::string_view message) {
  const time_t secs = static_cast<time_t>(realtime_ns / 1'000'000'000);
  const int ms = static_cast<int>((realtime_ns / 1'000'000) % 1000);
  tm local{};
  localtime_r(&secs, &local);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &local);
  char head[96];
  snprintf(head, sizeof head, "[%s.%03d %-7.*s %5d] ", stamp, ms, static_cast<int>(who.size()),
           who.data(), pid);
  std::string line(head);
  line += message;
  line += '\n';
  return line;
}

}  // namespace gpuslice::sim::mps
