// Clang thread-safety annotations (clang.llvm.org/docs/ThreadSafetyAnalysis)
// and an annotated mutex, so that "guarded by" and "caller holds" are checked
// by the compiler rather than stated in comments.
//
// Every clang build (the asan, tsan and fuzz presets) compiles with
// -Wthread-safety -Werror=thread-safety (CMakeLists.txt); with gcc the macros
// expand to nothing. libstdc++'s std::mutex carries no annotations, so
// annotated state is guarded by gpuslice::Mutex, held through MutexLock:
//
//   Mutex mu_;
//   std::deque<Task> queue_ GUARDED_BY(mu_);
//   void DrainLocked() REQUIRES(mu_);
//   ...
//   MutexLock lock(&mu_);             // or MutexLock lock(mu_)
//   cv_.wait(lock, [&]() REQUIRES(mu_) { return !queue_.empty(); });
//
// Condition variables are std::condition_variable_any (MutexLock is
// BasicLockable). docs/errors.md says what happens when an invariant fails.
#pragma once

#include <mutex>

#if defined(__clang__)
#define GS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define GS_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) GS_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY GS_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) GS_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) GS_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) GS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) GS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) GS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) GS_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) GS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) GS_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) GS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) GS_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) GS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) GS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) GS_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) GS_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS GS_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace gpuslice {

// A std::mutex the analysis knows about. Same cost, same semantics.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the caller holds the mutex (no run-time check):
  // for callbacks that are only ever invoked with it held.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

  // BasicLockable, for std::scoped_lock and friends.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope. BasicLockable itself (unlock()/lock()), so a
// std::condition_variable_any can wait on it; the analysis treats the mutex as
// held throughout, which is what the waiting code sees.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(&mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Lets go of the mutex inside the scope and takes it again (say, to run a
  // callback unlocked); the analysis follows both, and the destructor
  // releases the mutex only if it is held then (as std::unique_lock does).
  void Unlock() RELEASE() {
    held_ = false;
    mu_->Unlock();
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

  // For std::condition_variable_any only (it unlocks around the wait and
  // locks again before returning).
  void lock() NO_THREAD_SAFETY_ANALYSIS { Lock(); }
  void unlock() NO_THREAD_SAFETY_ANALYSIS { Unlock(); }

 private:
  Mutex* mu_;
  bool held_ = true;
};

}  // namespace gpuslice
