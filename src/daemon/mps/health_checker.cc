#include "daemon/mps/health_checker.h"

namespace gpuslice::daemon::mps {

MpsHealthChecker::MpsHealthChecker(MpsManager& manager, std::chrono::milliseconds interval)
    : manager_(manager), interval_(interval), thread_([this] { Loop(); }) {}

MpsHealthChecker::~MpsHealthChecker() { Stop(); }

void MpsHealthChecker::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MpsHealthChecker::Loop() {
  MutexLock lock(mu_);
  while (!wake_.wait_for(lock, interval_, [this]() REQUIRES(mu_) { return stopping_; })) {
    lock.Unlock();
    manager_.CheckHealth();
    lock.Lock();
  }
}

}  // namespace gpuslice::daemon::mps
