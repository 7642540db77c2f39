#include "daemon/mps/health_checker.h"

namespace gpuslice::daemon::mps {

MpsHealthChecker::MpsHealthChecker(MpsManager& manager, std::chrono::milliseconds interval)
    : manager_(manager), interval_(interval), thread_([this] { Loop(); }) {}

MpsHealthChecker::~MpsHealthChecker() { Stop(); }

void MpsHealthChecker::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MpsHealthChecker::Loop() {
  std::unique_lock lock(mu_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    manager_.CheckHealth();
    lock.lock();
  }
}

}  // namespace gpuslice::daemon::mps
