// The MPS log files (control.log, server.log) in NVIDIA's line format:
//   [2026-02-06 09:34:17.770 Control   261] message
// Appends one write(2) per line, so lines of several processes interleave whole.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuslice::sim::mps {

class LogFile {
 public:
  static StatusOr<std::unique_ptr<LogFile>> Open(const std::string& path);
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // `who`: "Control", "Server" or "Other".
  void Write(std::string_view who, std::string_view message);

 private:
  explicit LogFile(int fd) : fd_(fd) {}
  int fd_;
};

// "[YYYY-MM-DD HH:MM:SS.mmm <who> <pid>] <message>\n" for the given wall time.
std::string FormatLogLine(int64_t realtime_ns, std::string_view who, int pid,
                          std::string_view message);

}  // namespace gpuslice::sim::mps
