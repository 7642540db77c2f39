// Fuzzes group segment validation (src/shm/group_segment.cc): a segment file
// with hostile contents, opened by GroupSegment::Open, must be refused or
// re-initialised, and what a valid-looking one holds (counts, indexes,
// strings) must never be trusted past its bounds.
//
// Input: the first byte picks the file: even, the input's remaining bytes are
// the file as they are (random bytes: refused without `create`, re-initialised
// with it); odd, a freshly initialised segment patched by the remaining bytes
// as records [offset: 2 bytes, little-endian][length: 1 byte][bytes], offsets
// taken modulo the layout's size. The patches never touch the header's magic
// and version when the first byte is 1 mod 4 (so the fuzzer reaches the
// contents). They may leave the ledger lock "held" by no one: the member
// evicts that holder after its deadline (short here) and repairs the ledger.
// Then it is read as an observer and as a member (attach a device, join,
// reserve, charge, release, reap), checking that the counts stay in range.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "fuzz_input.h"
#include "gpuslice/group_segment.h"
#include "shm/group_segment.h"
#include "shm/ledger_eviction_testing.h"

namespace gpuslice {
namespace {

constexpr size_t kSize = sizeof(GroupSegmentLayout);
// How long the member waits for a ledger lock the patches left "held".
constexpr int64_t kLedgerDeadlineNs = 1'000'000;

// A directory of our own (the segment code refuses files others could write).
const std::string& Dir() {
  static const fuzz::TempDir dir("gpuslice-fuzz-shm");
  return dir.path();
}

// The bytes of a freshly initialised segment of group "g".
const std::string& Fresh() {
  static const std::string bytes = [] {
    std::filesystem::remove(GroupSegment::PathFor(Dir(), "g"));
    { auto seg = GroupSegment::Open(Dir(), "g", /*create=*/true); }
    std::ifstream in(GroupSegment::PathFor(Dir(), "g"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  return bytes;
}

std::string Patched(const uint8_t* data, size_t size, bool keep_header) {
  std::string file = Fresh();
  if (file.size() != kSize) fuzz::Fail("fresh segment size", std::to_string(file.size()));
  const size_t header_end = offsetof(GroupSegmentHeader, size);  // magic and version
  size_t i = 0;
  while (i + 3 <= size) {
    size_t offset = (data[i] | (data[i + 1] << 8)) % kSize;
    size_t len = data[i + 2];
    i += 3;
    for (size_t k = 0; k < len && i < size; ++k, ++i, offset = (offset + 1) % kSize) {
      if (keep_header && offset < header_end) continue;
      file[offset] = static_cast<char>(data[i]);
    }
  }
  return file;
}

void Check(const GroupSegment& seg) {
  const int n = seg.device_count();
  if (n < 0 || n > kGroupMaxDevices) fuzz::Fail("device_count", std::to_string(n));
  GroupSnapshot snap = seg.Snapshot();
  if (snap.devices.size() > static_cast<size_t>(kGroupMaxDevices))
    fuzz::Fail("snapshot", "devices");
  if (snap.members.size() > static_cast<size_t>(kGroupMaxSlots)) fuzz::Fail("snapshot", "members");
  for (int d = 0; d < n; ++d) {
    (void)seg.DeviceUuid(d);
    (void)seg.MemoryLimit(d);
    (void)seg.ledger().MemoryUsed(d);
    (void)seg.ComputeLimit(d);
    (void)seg.schedule().ComputeGrant(d);
    (void)seg.schedule().PacedRateBp(d);
    (void)seg.schedule().Counters(d);
  }
  (void)seg.FindDevice("GPU-fuzz");
  (void)seg.MemberPids();
  (void)seg.ChangeWord();
  (void)seg.schedule().Paused();
  (void)seg.control().ControllerIsDaemon();
  (void)seg.HasAttachedProcess();
  (void)seg.LastAliveNs();
  (void)seg.control().DaemonClaims(0);
}

}  // namespace
}  // namespace gpuslice

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuslice;
  if (size == 0) return 0;
  const std::string contents = (data[0] & 1)
                                   ? Patched(data + 1, size - 1, (data[0] & 3) == 1)
                                   : std::string(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string path = GroupSegment::PathFor(Dir(), "g");
  {
    std::filesystem::remove(path);
    std::ofstream out(path, std::ios::binary);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  }
  chmod(path.c_str(), 0600);

  // As an observer: refused, or read within bounds.
  {
    auto observer = GroupSegment::Open(Dir(), "g", /*create=*/false);
    if (observer.ok()) Check(**observer);
    if (!(data[0] & 1) && contents.size() != kSize && observer.ok()) {
      fuzz::Fail("a file of the wrong size was trusted", std::to_string(contents.size()));
    }
  }

  // As a member: re-initialised if invalid, then used.
  auto member = GroupSegment::Open(Dir(), "g", /*create=*/true);
  if (!member.ok()) fuzz::Fail("member open", member.status().message());
  GroupSegment& seg = **member;
  gpuslice::testing::LedgerLock::SetDeadline(seg, kLedgerDeadlineNs);
  Check(seg);
  auto dev = seg.AttachDevice("GPU-fuzz");
  auto slot = seg.Join(getpid(), 1, "fuzz");
  if (dev.ok() && slot.ok()) {
    if (*dev < 0 || *dev >= kGroupMaxDevices) fuzz::Fail("device index", std::to_string(*dev));
    if (*slot < 0 || *slot >= kGroupMaxSlots) fuzz::Fail("slot index", std::to_string(*slot));
    if (seg.ledger().Reserve(*slot, *dev, 4096)) seg.ledger().Release(*slot, *dev, 4096);
    seg.ledger().Charge(*slot, *dev, 1);
    (void)seg.ledger().SlotMemory(*slot, *dev);
    seg.Leave(*slot);
  }
  (void)seg.ReapDead();
  Check(seg);
  return 0;
}
