#include "daemon/gpu/xid_watch.h"

#include <cinttypes>

#include "common/log.h"

namespace gpuslice::daemon {

bool IsCriticalXid(uint64_t xid) {
  switch (xid) {
    case 13:   // graphics engine exception
    case 31:   // GPU memory page fault
    case 43:   // GPU stopped processing
    case 45:   // preemptive cleanup, due to previous errors
    case 68:   // video processor exception
    case 109:  // context switch timeout
      return false;
    default:
      return true;
  }
}

XidWatch::XidWatch(std::unique_ptr<Source> source, std::chrono::milliseconds wait)
    : source_(std::move(source)), wait_(wait) {}

XidWatch::~XidWatch() { Stop(); }

void XidWatch::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
}

void XidWatch::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

XidState XidWatch::Of(uint32_t index) const {
  MutexLock lock(mu_);
  auto it = seen_.find(index);
  return it == seen_.end() ? XidState{} : it->second;
}

void XidWatch::Record(const Event& event) {
  const bool critical = IsCriticalXid(event.xid);
  const auto xid = static_cast<uint32_t>(event.xid);
  {
    MutexLock lock(mu_);
    XidState& s = seen_[event.index];
    ++s.errors;
    s.last = xid;
    if (critical) s.critical = xid;
  }
  if (critical) {
    GS_LOG(kError, "gpu",
           "event=gpu_xid gpu=%u xid=%" PRIu64
           " critical=true action=\"the GPU is unhealthy until the daemon restarts\"",
           event.index, event.xid);
  } else {
    GS_LOG(kWarn, "gpu", "event=gpu_xid gpu=%u xid=%" PRIu64 " critical=false", event.index,
           event.xid);
  }
}

void XidWatch::Run() {
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stop_) return;
    }
    auto event = source_->Wait(wait_);
    if (!event.ok()) {
      GS_LOG(kError, "gpu", "event=xid_watch_stopped error=\"%s\"",
             event.status().message().c_str());
      return;
    }
    if (*event) Record(**event);
  }
}

}  // namespace gpuslice::daemon
