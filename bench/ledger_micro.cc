// ledger_micro: what the limiter's allocation path spends its time on, part
// by part (google benchmark; no GPU, no simulator):
//
// - BM_SegmentReserveRelease: one MemoryLedger::Reserve + Release pair, the
//   group's shared ledger (lock-free: compare-and-swap in a file mapping);
// - BM_LedgerTrackUntrack: one Ledger::Track + Untrack pair, the process's
//   table of tracked pointers, with `range(0)` other pointers live;
// - BM_UnorderedMapTrackUntrack: the same with a node-based map under a
//   mutex, as the tracking was before the ledger (for comparison);
// - BM_LedgerAllocFree: the whole bookkeeping of one allocation and its free
//   as the hooks do it (ReserveDevice, TrackReserved, UntrackAndRelease),
//   driver excluded.
//
//   build/release/bin/gpuslice-bench-ledger [--benchmark_repetitions=5 ...]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "limiter/ledger.h"
#include "shm/group_segment.h"

namespace gpuslice::limiter {
namespace {

constexpr char kUuid[] = "GPU-00000000-1111-2222-3333-444444444444";
constexpr uint64_t kMiB = 1 << 20;

// A segment in a private directory under /dev/shm, removed at exit.
struct TempSegment {
  TempSegment() {
    char tmpl[] = "/dev/shm/gpuslice-bench-ledger-XXXXXX";
    dir = mkdtemp(tmpl) != nullptr ? tmpl : "/tmp";
    segment = std::move(GroupSegment::Open(dir, "bench", true)).value();
    device = *segment->AttachDevice(kUuid);
    segment->SetMemoryLimit(device, 1ull << 40);
    slot = *segment->Join(getpid(), 0, "bench");
  }
  ~TempSegment() {
    segment.reset();
    std::filesystem::remove_all(dir);
  }
  std::string dir;
  std::unique_ptr<GroupSegment> segment;
  int device = 0;
  int slot = 0;
};

void BM_SegmentReserveRelease(benchmark::State& state) {
  TempSegment t;
  for (auto _ : state) {
    benchmark::DoNotOptimize(t.segment->ledger().Reserve(t.slot, t.device, kMiB));
    t.segment->ledger().Release(t.slot, t.device, kMiB);
  }
}
BENCHMARK(BM_SegmentReserveRelease);

void BM_LedgerTrackUntrack(benchmark::State& state) {
  Ledger ledger;
  const auto live = static_cast<uint64_t>(state.range(0));
  for (uint64_t i = 0; i < live; ++i) {
    ledger.Track(Resource::kPointer, (i + 1) << 21, Charge{0, kMiB, 1});
  }
  const uint64_t id = (live + 7) << 21;
  for (auto _ : state) {
    ledger.Track(Resource::kPointer, id, Charge{0, kMiB, 1});
    benchmark::DoNotOptimize(ledger.Untrack(Resource::kPointer, id));
  }
}
BENCHMARK(BM_LedgerTrackUntrack)->Arg(0)->Arg(1000)->Arg(100000);

// For comparison: what the ledger replaced (issue 3's tracking: a node-based
// map per resource kind under a mutex).
void BM_UnorderedMapTrackUntrack(benchmark::State& state) {
  std::mutex mu;
  std::unordered_map<uint64_t, Charge> map;
  const auto live = static_cast<uint64_t>(state.range(0));
  for (uint64_t i = 0; i < live; ++i) map[(i + 1) << 21] = Charge{0, kMiB, 1};
  const uint64_t id = (live + 7) << 21;
  for (auto _ : state) {
    {
      std::lock_guard lock(mu);
      map[id] = Charge{0, kMiB, 1};
    }
    std::lock_guard lock(mu);
    auto it = map.find(id);
    benchmark::DoNotOptimize(it->second);
    map.erase(it);
  }
}
BENCHMARK(BM_UnorderedMapTrackUntrack)->Arg(0)->Arg(1000)->Arg(100000);

void BM_LedgerAllocFree(benchmark::State& state) {
  TempSegment t;
  Ledger ledger;
  ledger.Bind(t.segment.get());
  uint64_t id = 1 << 21;
  for (auto _ : state) {
    auto charge = ledger.ReserveDevice(t.device, kMiB);
    ledger.TrackReserved(Resource::kPointer, id, *charge);
    benchmark::DoNotOptimize(ledger.UntrackAndRelease(Resource::kPointer, id));
    id += 1 << 21;
  }
}
BENCHMARK(BM_LedgerAllocFree);

// The same through the general calls (Reserve, Track, Untrack, Release: the
// slot changed in a critical section of its own each way), for comparison.
void BM_LedgerAllocFreeGeneral(benchmark::State& state) {
  TempSegment t;
  Ledger ledger;
  ledger.Bind(t.segment.get());
  uint64_t id = 1 << 21;
  for (auto _ : state) {
    auto charge = ledger.Reserve(t.device, kMiB);
    ledger.Track(Resource::kPointer, id, *charge);
    if (auto c = ledger.Untrack(Resource::kPointer, id)) ledger.Release(*c);
    id += 1 << 21;
  }
}
BENCHMARK(BM_LedgerAllocFreeGeneral);

}  // namespace
}  // namespace gpuslice::limiter

BENCHMARK_MAIN();
