#include "limiter/stream_devices.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>

#include "limiter/real/real_driver.h"

namespace gpuslice::limiter {
namespace {

// The default streams' watch, per thread (initial-exec: no allocation).
thread_local StreamBacklog default_backlog __attribute__((tls_model("initial-exec")));
thread_local int default_device __attribute__((tls_model("initial-exec"))) = -1;

// Destroys the marker events of a replaced or destroyed stream (its context
// may be gone: the driver's error is of no consequence) and resets its watch.
// Its launches still queued are counted as complete (no marker is left to
// tell): otherwise the member's queued count would keep them for good.
void DestroyMarkers(StreamBacklog& b) {
  const real::CudaTable& cu = real::Cuda();
  b.Lock();
  for (CUevent& ev : b.markers) {
    if (ev != nullptr && cu.cuEventDestroy_v2 != nullptr) cu.cuEventDestroy_v2(ev);
    ev = nullptr;
  }
  if (const uint64_t n = b.watch.outstanding(); n > 0 && b.member != nullptr) {
    ComputeBudget(*b.device, *b.member).Completed(n);
  }
  b.watch.Reset();
  b.device = nullptr;
  b.member = nullptr;
  b.Unlock();
}

// A thread's default-stream markers are destroyed when the thread exits (a
// key's destructor: thread_local objects with destructors would need a
// dynamic initialiser). The key is created once, on first use.
pthread_key_t exit_key;
pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
bool exit_key_made = false;  // written once, under exit_key_once
thread_local bool exit_hooked __attribute__((tls_model("initial-exec"))) = false;

void DestroyThreadMarker(void* backlog) { DestroyMarkers(*static_cast<StreamBacklog*>(backlog)); }

void HookThreadExit() {
  if (exit_hooked) return;
  exit_hooked = true;
  pthread_once(&exit_key_once,
               [] { exit_key_made = pthread_key_create(&exit_key, DestroyThreadMarker) == 0; });
  if (exit_key_made) pthread_setspecific(exit_key, &default_backlog);
}

size_t Slot(uintptr_t raw) {
  // Stream handles are heap pointers: drop the alignment bits, mix the rest.
  const uint64_t h = (static_cast<uint64_t>(raw) >> 4) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(h >> 58) % StreamDevices::kEntries;
}

}  // namespace

void StreamDevices::SetOrdinals(const std::vector<int>& ordinal_to_device) {
  const int n = std::min<int>(static_cast<int>(ordinal_to_device.size()), kMaxOrdinals);
  for (int i = 0; i < n; ++i) {
    ordinals_[i].store(static_cast<int8_t>(ordinal_to_device[i]), std::memory_order_relaxed);
  }
  for (Entry& e : entries_) {
    e.stream.store(0, std::memory_order_relaxed);
    // A forked child: the parent's events mean nothing here, and a lock a
    // parent's thread held at the fork has no holder left.
    e.backlog.lock.clear(std::memory_order_relaxed);
    e.backlog.watch.Reset();
    e.backlog.markers.fill(nullptr);
    e.backlog.device = nullptr;  // the parent's slot: the parent counts its launches
    e.backlog.member = nullptr;
  }
  ordinal_count_.store(n, std::memory_order_release);
}

bool StreamDevices::IsDefault(uintptr_t raw) {
  return raw == 0 || raw == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY) ||
         raw == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD);
}

int StreamDevices::GroupDevice(CUdevice ordinal) const {
  if (ordinal < 0 || ordinal >= ordinal_count_.load(std::memory_order_acquire)) return -1;
  return ordinals_[ordinal].load(std::memory_order_relaxed);
}

int StreamDevices::Ask(CUstream stream) const {
  const real::CudaTable& cu = real::Cuda();
  // One call where the driver has it (r570+); else through the stream's
  // context, made current for the question.
  if (CUdevice dev = -1;
      cu.cuStreamGetDevice != nullptr && cu.cuStreamGetDevice(stream, &dev) == CUDA_SUCCESS) {
    return GroupDevice(dev);
  }
  if (cu.cuStreamGetCtx == nullptr || cu.cuCtxPushCurrent_v2 == nullptr ||
      cu.cuCtxGetDevice == nullptr) {
    return -1;
  }
  CUcontext ctx = nullptr;
  if (cu.cuStreamGetCtx(stream, &ctx) != CUDA_SUCCESS || ctx == nullptr) return -1;
  if (cu.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS) return -1;
  CUdevice dev = -1;
  const int device = cu.cuCtxGetDevice(&dev) == CUDA_SUCCESS ? GroupDevice(dev) : -1;
  CUcontext popped = nullptr;
  cu.cuCtxPopCurrent_v2(&popped);
  return device;
}

int StreamDevices::Resolve(CUstream stream, StreamBacklog** backlog) {
  const auto raw = reinterpret_cast<uintptr_t>(stream);
  if (IsDefault(raw)) {
    const real::CudaTable& cu = real::Cuda();
    CUdevice dev = -1;
    if (cu.cuCtxGetDevice == nullptr || cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -1;
    const int device = GroupDevice(dev);
    if (device != default_device) {
      default_device = device;
      DestroyMarkers(default_backlog);  // created in the other device's context
    }
    HookThreadExit();  // its marker goes with the thread
    *backlog = &default_backlog;
    return device;
  }
  Entry& e = entries_[Slot(raw)];
  if (e.stream.load(std::memory_order_acquire) == raw) {
    const int device = e.device.load(std::memory_order_acquire);
    if (e.stream.load(std::memory_order_acquire) == raw) {
      *backlog = &e.backlog;
      return device;
    }
  }
  const int device = Ask(stream);
  if (device < 0) return -1;
  // Replace the entry: empty it first, so a racing lookup of the old stream
  // misses rather than reading the new device.
  e.stream.store(0, std::memory_order_release);
  e.device.store(device, std::memory_order_release);
  DestroyMarkers(e.backlog);
  e.stream.store(raw, std::memory_order_release);
  *backlog = &e.backlog;
  return device;
}

void StreamDevices::Forget(CUstream stream) {
  const auto raw = reinterpret_cast<uintptr_t>(stream);
  if (IsDefault(raw)) return;
  Entry& e = entries_[Slot(raw)];
  uintptr_t expected = raw;
  if (e.stream.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) {
    DestroyMarkers(e.backlog);
  }
}

}  // namespace gpuslice::limiter
