#include "shm/group_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iterator>

#include "common/clock.h"
#include "common/log.h"
#include "shm/segment_fields.h"

namespace gpuslice {

using segment_fields::Atomic;
using segment_fields::Load;
using segment_fields::LockedByOther;
using segment_fields::OfdLock;
using segment_fields::RaiseTo;
using segment_fields::TakeAtMost;

namespace {

constexpr std::string_view kFilePrefix = "group-";
// A function, not a global std::string: the limiter has no dynamic initialisers.
std::string FileSuffix() { return ".v" + std::to_string(kGroupSegmentVersion); }

std::string Errno(const std::string& what) { return segment_fields::ErrnoText(what, errno); }

bool HeaderValid(const GroupSegmentLayout* s) {
  return s->header.magic == kGroupSegmentMagic && s->header.version == kGroupSegmentVersion &&
         s->header.size == sizeof(GroupSegmentLayout) && s->header.ready == 1 &&
         s->device_count <= kGroupMaxDevices;
}

void Initialize(GroupSegmentLayout* s, std::string_view group) {
  memset(static_cast<void*>(s), 0, sizeof(*s));
  s->header.magic = kGroupSegmentMagic;
  s->header.version = kGroupSegmentVersion;
  s->header.size = sizeof(GroupSegmentLayout);
  s->header.created_ns = MonotonicNs();
  memcpy(s->group, group.data(), std::min<size_t>(group.size(), kGroupIdBytes - 1));
  for (GroupDevice& d : s->devices) {
    d.memory_limit = kUnlimitedBytes;
    d.compute_limit = kUnlimitedPercent;
  }
  Atomic(s->header.ready).store(1, std::memory_order_release);
}

// Segments are read and written by their creator's uid and gid only: another
// local user can neither change a group's limits nor its ledger (docs/security.md).
constexpr mode_t kSegmentMode = 0660;

// The error for a segment this process may not open, naming who may.
Status NotYours(const std::string& path, std::string_view group) {
  std::string owner;
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    owner = " (it belongs to uid " + std::to_string(st.st_uid) + ", gid " +
            std::to_string(st.st_gid) + ")";
  }
  return PermissionDenied("group '" + std::string(group) + "' is not this user's" + owner +
                          ": only its creator's uid and gid, and root, may open " + path);
}

bool InOurGroups(gid_t gid) {
  if (gid == getegid()) return true;
  gid_t groups[256];
  const int n = getgroups(256, groups);
  return std::find(groups, groups + std::max(n, 0), gid) != groups + std::max(n, 0);
}

// A member joins only a segment that no one outside its uid, its gid and root
// can write: a file another user made in the shared directory (to squat a
// group's name) is refused, not trusted with the group's limits and ledger.
Status CheckTrusted(SegmentOs& os, int fd, const struct stat& st, const std::string& path) {
  const bool mine = st.st_uid == geteuid();
  bool others_write = (st.st_mode & 0002) != 0;
  if (others_write && mine && os.Fchmod(fd, kSegmentMode) == 0) others_write = false;  // tightened
  const bool owner_ok = mine || st.st_uid == 0 || geteuid() == 0 || InOurGroups(st.st_gid);
  if (!others_write && owner_ok) return Status::Ok();
  return PermissionDenied(path + " is not trusted: it belongs to uid " + std::to_string(st.st_uid) +
                          " gid " + std::to_string(st.st_gid) +
                          (others_write ? " and anyone may write it" : "") +
                          "; remove it (as root) or pick another group");
}

Status MakeDir(SegmentOs& os, const std::string& dir) {
  if (os.Mkdir(dir.c_str(), 01777) == 0) {
    os.Chmod(dir.c_str(), 01777);  // members of one pod may run as different users
    return Status::Ok();
  }
  if (errno == EEXIST) return Status::Ok();
  return Unavailable(Errno("cannot create " + dir));
}

}  // namespace

std::string GroupSegment::PathFor(const std::string& dir, std::string_view group) {
  return dir + "/" + std::string(kFilePrefix) + std::string(group) + FileSuffix();
}

std::vector<std::string> GroupSegment::ListGroups(const std::string& dir) {
  std::vector<std::string> groups;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return groups;
  const std::string suffix = FileSuffix();
  while (dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    if (name.starts_with(kFilePrefix) && name.ends_with(suffix) &&
        name.size() > kFilePrefix.size() + suffix.size()) {
      name.remove_prefix(kFilePrefix.size());
      name.remove_suffix(suffix.size());
      groups.emplace_back(name);
    }
  }
  closedir(d);
  std::sort(groups.begin(), groups.end());
  return groups;
}

StatusOr<std::unique_ptr<GroupSegment>> GroupSegment::Open(const std::string& dir,
                                                           std::string_view group, bool create,
                                                           SegmentOs& os) {
  if (create) GS_RETURN_IF_ERROR(MakeDir(os, dir));
  const std::string path = PathFor(dir, group);
  int fd = -1;
  // An attacher holds the attach lock for its life; a segment unlinked by a
  // collector between our open and our lock is stale: open the path again.
  for (int attempt = 0;; ++attempt) {
    fd = os.Open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), kSegmentMode);
    if (fd < 0) {
      if (errno == ENOENT) return NotFound("group '" + std::string(group) + "' has no segment");
      if (errno == EACCES) return NotYours(path, group);
      return Unavailable(Errno("cannot open " + path));
    }
    if (!create) break;
    if (int err = OfdLock(os, fd, kAttachLockOffset, F_RDLCK, true); err != 0) {
      os.Close(fd);
      errno = err;
      return Unavailable(Errno("cannot take the attach lock of " + path));
    }
    struct stat linked {};
    if (os.Fstat(fd, &linked) == 0 && linked.st_nlink > 0) break;
    os.Close(fd);
    if (attempt == 8) return Unavailable(path + " keeps being removed while it is opened");
  }
  // Creation and validation are serialised by flock (independent of the OFD
  // byte locks that members hold for their slots).
  while (os.Flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      Status s = Unavailable(Errno("cannot lock " + path));
      os.Close(fd);
      return s;
    }
  }
  auto fail = [&](Status s) {
    os.Flock(fd, LOCK_UN);
    os.Close(fd);
    return s;
  };
  struct stat st {};
  if (os.Fstat(fd, &st) != 0) return fail(Unavailable(Errno("cannot stat " + path)));
  if (create) {
    if (Status trusted = CheckTrusted(os, fd, st, path); !trusted.ok()) return fail(trusted);
  }
  const bool fresh = static_cast<size_t>(st.st_size) != sizeof(GroupSegmentLayout);
  if (fresh) {
    if (!create) return fail(FailedPrecondition(path + " is not a valid group segment"));
    os.Fchmod(fd, kSegmentMode);  // whatever the umask: the group's gid may join
    if (os.Ftruncate(fd, 0) != 0 || os.Ftruncate(fd, sizeof(GroupSegmentLayout)) != 0) {
      return fail(Unavailable(Errno("cannot size " + path)));
    }
  }
  void* p = os.Mmap(sizeof(GroupSegmentLayout), PROT_READ | PROT_WRITE, fd);
  if (p == MAP_FAILED) return fail(Unavailable(Errno("cannot map " + path)));
  auto* layout = static_cast<GroupSegmentLayout*>(p);
  if (fresh || !HeaderValid(layout)) {
    if (!create) {
      os.Munmap(p, sizeof(GroupSegmentLayout));
      return fail(FailedPrecondition(path + " is not a valid group segment"));
    }
    Initialize(layout, group);
  }
  os.Flock(fd, LOCK_UN);
  return std::unique_ptr<GroupSegment>(
      new GroupSegment(os, std::string(group), path, fd, layout, /*attached=*/create));
}

GroupSegment::GroupSegment(SegmentOs& os, std::string group, std::string path, int fd,
                           GroupSegmentLayout* layout, bool attached)
    : os_(os),
      group_(std::move(group)),
      path_(std::move(path)),
      fd_(fd),
      layout_(layout),
      attached_(attached),
      control_(os, fd_, path_, *layout) {}

GroupSegment::~GroupSegment() {
  os_.Munmap(layout_, sizeof(GroupSegmentLayout));
  os_.Close(fd_);  // drops this handle's OFD locks
}

// ---- devices ----

int GroupSegment::device_count() const {
  return static_cast<int>(std::min<uint32_t>(Load(layout_->device_count), kGroupMaxDevices));
}

int GroupSegment::FindDevice(std::string_view uuid) const {
  const int n = device_count();
  for (int i = 0; i < n; ++i) {
    const char* u = layout_->devices[i].uuid;
    // First byte 0: claimed and not yet written (AttachDevice), or never.
    if (Load(u[0]) == '\0') continue;
    if (uuid.size() < kUuidBytes && strncmp(u, uuid.data(), uuid.size()) == 0 &&
        u[uuid.size()] == '\0') {
      return i;
    }
  }
  return -1;
}

StatusOr<int> GroupSegment::AttachDevice(std::string_view uuid) {
  if (uuid.empty() || uuid.size() >= kUuidBytes) {
    return InvalidArgument("device UUID '" + std::string(uuid) + "' is not a GPU UUID");
  }
  if (int d = FindDevice(uuid); d >= 0) return d;
  int d = -1;
  {
    const LedgerHold hold(*this);
    // An entry is claimed by moving device_count past it from the count
    // read, and written only by its claimant, its UUID's first byte last
    // (FindDevice skips the entry until then): a holder evicted here that
    // resumes cannot overwrite an entry another holder published.
    auto count = Atomic(layout_->device_count);
    for (;;) {
      d = FindDevice(uuid);  // another member may have added it meanwhile
      if (d >= 0) break;
      uint32_t n = count.load(std::memory_order_acquire);
      if (n >= kGroupMaxDevices) break;
      if (count.compare_exchange_strong(n, n + 1, std::memory_order_acq_rel)) {
        char* to = layout_->devices[n].uuid;
        memset(to + 1, 0, kUuidBytes - 1);
        memcpy(to + 1, uuid.data() + 1, uuid.size() - 1);
        Atomic(to[0]).store(uuid[0], std::memory_order_release);
        d = static_cast<int>(n);
        break;
      }
    }
  }
  if (d < 0) {
    return ResourceExhausted("group '" + group_ + "' already spans " +
                             std::to_string(kGroupMaxDevices) + " devices");
  }
  return d;
}

void GroupSegment::LowerMemoryLimit(int dev, uint64_t bytes) {
  auto limit = Atomic(layout_->devices[dev].memory_limit);
  uint64_t cur = limit.load();
  while (bytes < cur && !limit.compare_exchange_weak(cur, bytes)) {
  }
  if (bytes < cur) BumpLimits();
}

void GroupSegment::SetMemoryLimit(int dev, uint64_t bytes) {
  Atomic(layout_->devices[dev].memory_limit).store(bytes);
  BumpLimits();
}

void GroupSegment::LowerComputeLimit(int dev, uint32_t percent) {
  auto limit = Atomic(layout_->devices[dev].compute_limit);
  uint32_t cur = limit.load();
  while (percent < cur && !limit.compare_exchange_weak(cur, percent)) {
  }
  if (percent < cur) BumpLimits();
}

void GroupSegment::SetComputeLimit(int dev, uint32_t percent) {
  Atomic(layout_->devices[dev].compute_limit).store(percent);
  BumpLimits();
}

uint64_t GroupSegment::MemoryLimit(int dev) const {
  return Load(layout_->devices[dev].memory_limit);
}
uint32_t GroupSegment::ComputeLimit(int dev) const {
  return Load(layout_->devices[dev].compute_limit);
}

uint32_t GroupSegment::ChangeWord() const { return Load(layout_->change_word); }

void GroupSegment::WaitForChange(uint32_t seen, int64_t timeout_ns) const {
  if (timeout_ns <= 0) return;
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000),
              static_cast<long>(timeout_ns % 1'000'000'000)};
  // EAGAIN (the word moved), EINTR and ETIMEDOUT all mean: look again.
  syscall(SYS_futex, &layout_->change_word, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void GroupSegment::BumpLimits() {
  Atomic(layout_->limits_generation).fetch_add(1);
  segment_fields::SignalChange(*layout_);
}

// ---- the ledger's lock ----
//
// A lease in the segment (include/gpuslice/group_segment.h, "Concurrency"),
// not a pthread mutex: a mutex cannot be taken from a live holder, so one
// member stopped (SIGSTOP) or hung inside stalled every other member's
// joining, reaping and device attaching for ever. A holder that dies is
// recovered the same way, by eviction once the deadline has passed (a robust
// mutex's EOWNERDEAD did it at once, but only for death).
//
// What an evicted holder that resumes can and cannot do: it runs the rest of
// its section unlocked, beside the new holder, and the sections are written
// for that:
//  - AttachDevice claims an entry with a compare-and-swap of device_count and
//    writes only the entry it claimed: it cannot overwrite an entry another
//    holder published. It can add a second entry for a GPU another holder
//    added meanwhile (both attaching the same new UUID), and a claimant that
//    dies before writing its UUID leaves an entry no one finds.
//  - Join, Leave and ReapDead write only slots whose OFD lock the caller holds
//    (no other process holds it meanwhile); ClearSlotLocked takes the slot's
//    bytes with an exchange before taking them from memory_used, so each byte
//    is given back once and memory_used stays >= the slots' sum.
//  - DropOrphanChargesLocked zeroes a count only by a compare-and-swap from
//    what it read after seeing no owned slot, and looks at the slots again
//    in between: a member that joined and charged meanwhile (which an
//    evicted dropper cannot exclude) makes it drop nothing.
//  - RepairLedger only raises memory_used.
//  - Its release frees nothing: the lock word is no longer its token, and
//    ledger_dirty is cleared only from its own token.
// Anything else it writes it could write anyway: the members of a group
// trust each other with their own segment (docs/security.md). The goal is
// liveness (a stopped, hung or dead holder costs the others one deadline)
// and a repaired ledger, not a defence against a member's arbitrary writes.

namespace {
// The waits of a locker while another holds the lock: the lock is rarely
// contended, and its sections take microseconds.
constexpr int64_t kFirstNapNs = 20'000;
constexpr int64_t kLongestNapNs = 1'000'000;
}  // namespace

GroupSegment::LedgerHold::LedgerHold(const GroupSegment& segment)
    : segment_(segment), token_(segment.LockLedger()) {}

GroupSegment::LedgerHold::~LedgerHold() { segment_.UnlockLedger(token_); }

bool GroupSegment::LedgerHold::held() const {
  return Load(segment_.layout_->ledger_lock) == token_;
}

uint64_t GroupSegment::LockLedger() const {
  uint64_t mine = 0;
  while (mine == 0) mine = Atomic(layout_->ledger_tickets).fetch_add(1) + 1;
  const int64_t deadline_ns = ledger_deadline_ns_.load(std::memory_order_relaxed);
  auto lock = Atomic(layout_->ledger_lock);
  uint64_t holder = 0;   // the token seen holding the lock
  int64_t since_ns = 0;  // when this locker first saw it there
  int64_t nap_ns = kFirstNapNs;
  int64_t evicted_after_ns = -1;
  for (;;) {
    uint64_t seen = 0;
    if (lock.compare_exchange_strong(seen, mine, std::memory_order_acquire)) break;
    const int64_t now_ns = MonotonicNs();
    if (seen != holder) {
      holder = seen;
      since_ns = now_ns;
    } else if (now_ns - since_ns >= deadline_ns) {
      // Tokens are never reused: the swap succeeds only if `holder` has held
      // the lock all along. One evictor wins; the others see its token.
      if (lock.compare_exchange_strong(seen, mine, std::memory_order_acquire)) {
        evicted_after_ns = now_ns - since_ns;
        break;
      }
      continue;
    }
    timespec nap{0, static_cast<long>(nap_ns)};
    nanosleep(&nap, nullptr);
    nap_ns = std::min(2 * nap_ns, kLongestNapNs);
  }
  const uint64_t left_inside = Atomic(layout_->ledger_dirty).exchange(mine);
  if (evicted_after_ns >= 0) {
    Atomic(layout_->ledger_evictions).fetch_add(1);
    GS_LOG(kWarn, "shm",
           "group '%s': evicted the holder of the ledger lock after waiting %lld ms for it (a "
           "member stopped, hung or dead inside); repairing the ledger",
           group_.c_str(), static_cast<long long>(evicted_after_ns / 1'000'000));
  }
  if (evicted_after_ns >= 0 || left_inside != 0) RepairLedger();
  return mine;
}

void GroupSegment::UnlockLedger(uint64_t token) const {
  uint64_t inside = token;
  Atomic(layout_->ledger_dirty).compare_exchange_strong(inside, 0, std::memory_order_release);
  uint64_t held = token;
  if (!Atomic(layout_->ledger_lock).compare_exchange_strong(held, 0, std::memory_order_release)) {
    GS_LOG(kWarn, "shm",
           "group '%s': this process held the ledger lock past another member's deadline and was "
           "evicted; its section ran unlocked (the lock stays with its new holder)",
           group_.c_str());
  }
}

void GroupSegment::RepairLedger() const {
  // memory_used never falls below the slots' sum (invariant 1): raise it if
  // a holder that died or was evicted left it lower. Never lowered: the
  // excess may be members' charges in flight.
  for (int d = 0; d < kGroupMaxDevices; ++d) {
    uint64_t sum = 0;
    for (const ProcessSlot& s : layout_->slots) sum += Load(s.memory[d]);
    RaiseTo(layout_->devices[d].memory_used, sum);
  }
  DropOrphanChargesLocked();
}

void GroupSegment::DropOrphanChargesLocked() const {
  // No member owns a slot: no charge can be in flight (every step of the
  // ledger is made by a member, for its own slot, after it joined), so
  // whatever memory_used still counts is what dead members left between two
  // steps (invariant 1's excess, or a holder killed inside ClearSlotLocked).
  // Zeroed, counted. Each count is zeroed from the value read between two
  // looks at the slots: a member that joins and charges meanwhile (possible
  // when this holder was evicted, or beside an evicted joiner) either shows
  // in the second look or changes the count, and nothing is dropped.
  auto owned = [this] {
    return std::any_of(std::begin(layout_->slots), std::end(layout_->slots),
                       [](const ProcessSlot& s) { return Load(s.owner_pid) != 0; });
  };
  if (owned()) return;
  uint64_t left[kGroupMaxDevices];
  for (int d = 0; d < kGroupMaxDevices; ++d) left[d] = Load(layout_->devices[d].memory_used);
  if (owned()) return;
  for (int d = 0; d < kGroupMaxDevices; ++d) {
    if (left[d] == 0) continue;
    if (Atomic(layout_->devices[d].memory_used).compare_exchange_strong(left[d], 0)) {
      GS_LOG(kWarn, "shm", "group '%s': dropped %llu orphan bytes of device %d (no live member)",
             group_.c_str(), static_cast<unsigned long long>(left[d]), d);
    }
  }
}

// ---- membership ----

bool GroupSegment::SlotLive(int slot) const {
  if (slot == own_slot_) return true;
  return LockedByOther(os_, fd_, kSlotLockOffset + slot, F_WRLCK);
}

void GroupSegment::ClearSlotLocked(int s) const {
  ProcessSlot& slot = layout_->slots[s];
  for (int d = 0; d < kGroupMaxDevices; ++d) {
    // The slot's bytes first, then the group's (see Release).
    const uint64_t held = Atomic(slot.memory[d]).exchange(0);
    if (held != 0) TakeAtMost(layout_->devices[d].memory_used, held);
  }
  Atomic(slot.owner_pid).store(0);
  // A new owner starts with no launches, charges or probes of its own.
  for (SlotCompute& c : layout_->slot_compute[s]) {
    Atomic(c.launches).store(0);
    Atomic(c.charge_ns).store(0);
    Atomic(c.probe_ns).store(0);
    Atomic(c.probes).store(0);
    Atomic(c.waiting).store(0);
    Atomic(c.busy_ns).store(0);
    Atomic(c.busy_launches).store(0);
    Atomic(c.bound_ns).store(0);
    Atomic(c.bound_launches).store(0);
    Atomic(c.bound_floor_ns).store(0);
  }
  slot.start_time = 0;
  Atomic(slot.joined_ns).store(0);
  memset(slot.name, 0, sizeof slot.name);
}

StatusOr<int> GroupSegment::Join(pid_t pid, uint64_t start_time, std::string_view name) {
  if (own_slot_ >= 0) return own_slot_;
  for (int s = 0; s < kGroupMaxSlots; ++s) {
    if (OfdLock(os_, fd_, kSlotLockOffset + s, F_WRLCK, false) != 0) continue;  // a live member's
    {
      const LedgerHold hold(*this);
      ClearSlotLocked(s);  // whatever a dead owner left
      ProcessSlot& slot = layout_->slots[s];
      slot.start_time = start_time;
      Atomic(slot.joined_ns).store(MonotonicNs());
      memcpy(slot.name, name.data(), std::min<size_t>(name.size(), sizeof slot.name - 1));
      Atomic(slot.owner_pid).store(pid);
    }
    own_slot_ = s;
    return s;
  }
  return ResourceExhausted("group '" + group_ + "' has no free process slot (" +
                           std::to_string(kGroupMaxSlots) + " members alive)");
}

void GroupSegment::Leave(int slot) {
  if (slot != own_slot_ || slot < 0) return;
  {
    const LedgerHold hold(*this);
    ClearSlotLocked(slot);
    DropOrphanChargesLocked();
  }
  OfdLock(os_, fd_, kSlotLockOffset + slot, F_UNLCK, false);
  own_slot_ = -1;
}

int GroupSegment::ReapDead() const {
  int reaped = 0;
  for (int s = 0; s < kGroupMaxSlots; ++s) {
    if (s == own_slot_ || Load(layout_->slots[s].owner_pid) == 0) continue;
    if (OfdLock(os_, fd_, kSlotLockOffset + s, F_WRLCK, false) != 0) continue;  // alive
    {
      const LedgerHold hold(*this);
      if (Load(layout_->slots[s].owner_pid) != 0) {
        ClearSlotLocked(s);
        ++reaped;
        DropOrphanChargesLocked();
      }
    }
    OfdLock(os_, fd_, kSlotLockOffset + s, F_UNLCK, false);
  }
  return reaped;
}

// ---- devices and members ----

std::string GroupSegment::DeviceUuid(int dev) const {
  const char* uuid = layout_->devices[dev].uuid;
  if (Load(uuid[0]) == '\0') return {};  // claimed, not yet written (AttachDevice)
  return {uuid, strnlen(uuid, kUuidBytes)};
}

std::vector<GroupSegment::MemberRef> GroupSegment::Members() const {
  std::vector<MemberRef> out;
  for (int s = 0; s < kGroupMaxSlots; ++s) {
    const ProcessSlot& slot = layout_->slots[s];
    if (const int32_t pid = Load(slot.owner_pid); pid > 0) {
      out.push_back({s, pid, Load(slot.joined_ns)});
    }
  }
  return out;
}

bool GroupSegment::IsLiveMember(int32_t pid) const {
  if (pid <= 0) return false;
  for (int s = 0; s < kGroupMaxSlots; ++s) {
    if (Load(layout_->slots[s].owner_pid) == pid && SlotLive(s)) return true;
  }
  return false;
}

std::vector<int32_t> GroupSegment::MemberPids() const {
  std::vector<int32_t> pids;
  for (const ProcessSlot& slot : layout_->slots) {
    if (const int32_t pid = Load(slot.owner_pid); pid != 0) pids.push_back(pid);
  }
  return pids;
}

// ---- readers ----

GroupSnapshot GroupSegment::Snapshot() const {
  const ComputeSchedule schedule(*layout_);
  GroupSnapshot snap{.group = group_,
                     .paused = schedule.Paused(),
                     .ledger_evictions = Load(layout_->ledger_evictions),
                     .devices = {},
                     .members = {}};
  const int n = device_count();
  for (int d = 0; d < n; ++d) {
    const GroupDevice& dev = layout_->devices[d];
    const DeviceCompute& c = dev.compute;
    snap.devices.push_back(
        {.index = d,
         .uuid = DeviceUuid(d),
         .memory_used = Load(dev.memory_used),
         .memory_limit = MemoryLimit(d),
         .memory_peak = Load(dev.memory_peak),
         .alloc_failures = Load(dev.alloc_failures),
         .compute_limit = ComputeLimit(d),
         .grant_bp = schedule.ComputeGrant(d),
         .burst_ns = schedule.ComputeBurst(d),
         .share_bp = Load(c.measured_at_ns) != 0 ? static_cast<int32_t>(Load(c.share_bp)) : -1,
         .charge_ns = Load(c.charge_ns),
         .launches = Load(c.launches),
         .throttled = Load(c.waits),
         .throttled_ns = Load(c.wait_ns)});
  }
  for (int slot = 0; slot < kGroupMaxSlots; ++slot) {
    const ProcessSlot& p = layout_->slots[slot];
    const int32_t pid = Load(p.owner_pid);
    if (pid == 0 || !SlotLive(slot)) continue;
    GroupSnapshot::Member m{.slot = slot,
                            .pid = pid,
                            .name = std::string(p.name, strnlen(p.name, sizeof p.name)),
                            .memory = {}};
    for (int d = 0; d < n; ++d) m.memory.push_back(Load(p.memory[d]));
    snap.members.push_back(std::move(m));
  }
  return snap;
}

// ---- liveness and collection ----

bool GroupSegment::HasAttachedProcess() const {
  return LockedByOther(os_, fd_, kAttachLockOffset, F_WRLCK);
}

int64_t GroupSegment::LastAliveNs() const {
  return std::max(Load(layout_->header.created_ns), Load(layout_->controller_heartbeat_ns));
}

StatusOr<bool> GroupSegment::RemoveIfAbandoned(const std::string& dir, std::string_view group,
                                               int64_t grace_ns, int64_t now_ns, SegmentOs& os) {
  const std::string path = PathFor(dir, group);
  int fd = os.Open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) {
    if (errno == ENOENT) return false;  // already gone
    return Unavailable(Errno("cannot open " + path));
  }
  // Held until the file is unlinked: no process can attach meanwhile.
  if (OfdLock(os, fd, kAttachLockOffset, F_WRLCK, false) != 0) {
    os.Close(fd);
    return false;  // a process is attached
  }
  struct stat st {};
  bool remove = false;
  if (os.Fstat(fd, &st) == 0 && st.st_nlink > 0) {
    int64_t last_alive_ns = 0;
    bool valid = false;
    if (static_cast<size_t>(st.st_size) == sizeof(GroupSegmentLayout)) {
      void* p = os.Mmap(sizeof(GroupSegmentLayout), PROT_READ, fd);
      if (p != MAP_FAILED) {
        const auto* layout = static_cast<const GroupSegmentLayout*>(p);
        if (HeaderValid(layout)) {
          valid = true;
          last_alive_ns =
              std::max(Load(layout->header.created_ns), Load(layout->controller_heartbeat_ns));
        }
        os.Munmap(p, sizeof(GroupSegmentLayout));
      }
    }
    // Not a segment (a creator died before initialising it): nobody can be
    // attached to it, and there is no heartbeat to wait for.
    remove = !valid || now_ns - last_alive_ns >= grace_ns;
  }
  Status result = Status::Ok();
  if (remove && os.Unlink(path.c_str()) != 0 && errno != ENOENT) {
    result = Unavailable(Errno("cannot remove " + path));
  }
  os.Close(fd);  // drops the exclusive lock: a waiting attacher finds the file unlinked
  if (!result.ok()) return result;
  return remove;
}

// ---- fork ----

Status GroupSegment::ReopenAfterFork() {
  int fd = os_.Open(path_.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return Unavailable(Errno("cannot reopen " + path_));
  // The parent, attached, keeps the file linked until the child holds its own lock.
  if (attached_) {
    if (int err = OfdLock(os_, fd, kAttachLockOffset, F_RDLCK, true); err != 0) {
      os_.Close(fd);
      errno = err;
      return Unavailable(Errno("cannot take the attach lock of " + path_));
    }
  }
  os_.Close(fd_);  // the parent's open file description, and its locks, stay with the parent
  fd_ = fd;
  own_slot_ = -1;
  control_.held_ = false;
  return Status::Ok();
}

}  // namespace gpuslice
