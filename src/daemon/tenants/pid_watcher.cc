#include "daemon/tenants/pid_watcher.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "daemon/tenants/identity.h"

namespace gpuslice::daemon {
namespace {

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // the same number on every architecture
#endif

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

constexpr uint64_t kWakeTag = ~uint64_t{0};

}  // namespace

PidWatcher::PidWatcher(std::string proc_root) : proc_root_(std::move(proc_root)) {}

PidWatcher::~PidWatcher() { Stop(); }

Status PidWatcher::Start() {
  const int probe = PidfdOpen(getpid());
  if (probe < 0) {
    return Unavailable(std::string("pidfd_open is not available: ") + strerror(errno));
  }
  close(probe);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return Unavailable(std::string("epoll: ") + strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    return Unavailable(std::string("epoll_ctl: ") + strerror(errno));
  }
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void PidWatcher::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {
      GS_LOG(kError, "gpusliced", "event=pid_watcher_stop_failed error=\"%s\"", strerror(errno));
    }
    thread_.join();
  }
  MutexLock lock(mu_);
  for (const auto& [pid, w] : fds_) close(w.fd);
  fds_.clear();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  epoll_fd_ = wake_fd_ = -1;
}

Status PidWatcher::Watch(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return InvalidArgument("pid must be positive");
  const int fd = PidfdOpen(pid);
  if (fd < 0) {
    if (errno == ESRCH) return NotFound("no process " + std::to_string(pid));
    return Unavailable("pidfd_open(" + std::to_string(pid) + "): " + strerror(errno));
  }
  // The pidfd now pins one process; make sure it is the one meant.
  if (start_time != 0 && ReadStartTime(proc_root_, pid) != start_time) {
    close(fd);
    return NotFound("process " + std::to_string(pid) + " exited (its pid now names another)");
  }
  MutexLock lock(mu_);
  if (auto it = fds_.find(pid); it != fds_.end()) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
    close(it->second.fd);
    fds_.erase(it);
  }
  const uint32_t generation = next_generation_++;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = (uint64_t{generation} << 32) | static_cast<uint32_t>(pid);
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    const int err = errno;
    close(fd);
    return Unavailable("epoll_ctl: " + std::string(strerror(err)));
  }
  fds_[pid] = Watched{fd, generation};
  return Status::Ok();
}

void PidWatcher::Unwatch(pid_t pid) {
  MutexLock lock(mu_);
  auto it = fds_.find(pid);
  if (it == fds_.end()) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
  close(it->second.fd);
  fds_.erase(it);
}

size_t PidWatcher::WatchCount() const {
  MutexLock lock(mu_);
  return fds_.size();
}

void PidWatcher::Loop() {
  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
  for (;;) {
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      GS_LOG(kError, "gpusliced", "event=pid_watcher_failed error=\"%s\"", strerror(errno));
      return;
    }
    std::vector<pid_t> exited;
    {
      MutexLock lock(mu_);
      for (int i = 0; i < n; ++i) {
        if (events[i].data.u64 == kWakeTag) return;
        const auto pid = static_cast<pid_t>(events[i].data.u64 & 0xffffffffu);
        const auto generation = static_cast<uint32_t>(events[i].data.u64 >> 32);
        auto it = fds_.find(pid);
        // Unwatched or replaced since epoll_wait returned: not this watch's exit.
        if (it == fds_.end() || it->second.generation != generation) continue;
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
        close(it->second.fd);
        fds_.erase(it);
        exited.push_back(pid);
      }
    }
    if (!exited.empty() && callback_) callback_(exited);
  }
}

}  // namespace gpuslice::daemon
