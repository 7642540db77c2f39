#include "shm/group_segment.h"

#include "shm/group_segment_test_fixture.h"

namespace gpuslice::segment_test {
namespace {

class GroupSegmentTest : public SegmentTest {};

TEST_F(GroupSegmentTest, CreatesAValidSegmentAndListsIt) {
  auto seg = OpenGroup("pod-abc");
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(testing::RawLayout(*seg).header.magic, kGroupSegmentMagic);
  EXPECT_EQ(testing::RawLayout(*seg).header.size, sizeof(GroupSegmentLayout));
  EXPECT_STREQ(testing::RawLayout(*seg).group, "pod-abc");
  EXPECT_EQ(GroupSegment::ListGroups(dir_), std::vector<std::string>{"pod-abc"});
  EXPECT_EQ(GroupSegment::Open(dir_, "other", false).status().code(), StatusCode::kNotFound);
}

TEST_F(GroupSegmentTest, DevicesAreSharedByUuidAndLimitsOnlyLowerOnAttach) {
  auto a = OpenGroup();
  auto b = OpenGroup();
  auto da = a->AttachDevice(kUuid);
  ASSERT_TRUE(da.ok());
  auto other = a->AttachDevice("GPU-ffffffff-1111-2222-3333-444444444444");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *da);
  auto db = b->AttachDevice(kUuid);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*da, *db);
  EXPECT_EQ(a->MemoryLimit(*da), kUnlimitedBytes);
  a->LowerMemoryLimit(*da, 100 * kMiB);
  b->LowerMemoryLimit(*db, 200 * kMiB);  // higher: ignored
  EXPECT_EQ(b->MemoryLimit(*db), 100 * kMiB);
  b->SetMemoryLimit(*db, 300 * kMiB);  // an operator's explicit change may raise it
  EXPECT_EQ(a->MemoryLimit(*da), 300 * kMiB);
  EXPECT_FALSE(a->AttachDevice("").ok());
}

TEST_F(GroupSegmentTest, ASegmentOfAnotherLayoutVersionIsRefused) {
  { auto seg = OpenGroup(); }
  {
    auto seg = GroupSegment::Open(dir_, "g1", false);
    ASSERT_TRUE(seg.ok());
    testing::RawLayout(**seg).header.version =
        kGroupSegmentVersion - 1;  // v5: no count of queued launches
  }
  EXPECT_EQ(GroupSegment::Open(dir_, "g1", false).status().code(), StatusCode::kFailedPrecondition);
  auto rebuilt = OpenGroup();  // a member re-initialises it
  EXPECT_EQ(testing::RawLayout(*rebuilt).header.version, kGroupSegmentVersion);
  EXPECT_EQ(testing::RawLayout(*rebuilt).header.size, sizeof(GroupSegmentLayout));
}

TEST_F(GroupSegmentTest, MembersAndTheDaemonAreAskedForNotRead) {
  auto seg = OpenGroup();
  EXPECT_FALSE(seg->IsLiveMember(getpid()));
  ASSERT_TRUE(seg->Join(getpid(), 1, "me").ok());
  EXPECT_TRUE(seg->IsLiveMember(getpid()));
  EXPECT_FALSE(seg->IsLiveMember(0));
  EXPECT_FALSE(seg->IsLiveMember(getpid() + 100000));
  EXPECT_EQ(seg->control().DaemonPid(), 0);
  seg->control().BeatAsDaemon(4321, 10);
  EXPECT_EQ(seg->control().DaemonPid(), 4321);
  seg->control().EndDaemonClaim(4321);
  EXPECT_EQ(seg->control().DaemonPid(), 0);
}

TEST_F(GroupSegmentTest, ADeadMembersMemoryIsReclaimed) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  seg->LowerMemoryLimit(d, 100 * kMiB);
  const int mine = *seg->Join(getpid(), 1, "parent");
  ASSERT_TRUE(seg->ledger().Reserve(mine, d, 10 * kMiB));
  InChildThenKill([&] {
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    auto s = seg->Join(getpid(), 2, "child");
    if (!s.ok() || !seg->ledger().Reserve(*s, d, 80 * kMiB)) _exit(1);
  });
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 90 * kMiB);
  EXPECT_EQ(seg->ReapDead(), 1);
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 10 * kMiB);
  EXPECT_EQ(seg->ReapDead(), 0);
  EXPECT_EQ(seg->ledger().SlotMemory(mine, d), 10 * kMiB);  // the live member keeps its own
}

TEST_F(GroupSegmentTest, LiveMembersInOtherProcessesAreNotReaped) {
  auto seg = OpenGroup();
  const int d = *seg->AttachDevice(kUuid);
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    auto s = seg->Join(getpid(), 2, "child");
    if (!s.ok() || !seg->ledger().Reserve(*s, d, 5 * kMiB)) _exit(1);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    if (read(release[0], &c, 1) != 1) _exit(1);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(seg->ReapDead(), 0);
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 5 * kMiB);
  int live = 0;
  for (int s = 0; s < kGroupMaxSlots; ++s) live += seg->SlotLive(s) ? 1 : 0;
  EXPECT_EQ(live, 1);
  ASSERT_EQ(write(release[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(seg->ReapDead(), 1);
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 0u);
  for (int fd : {ready[0], ready[1], release[0], release[1]}) close(fd);
}

TEST_F(GroupSegmentTest, AHolderKilledInsideTheLedgerLockDoesNotWedgeTheGroup) {
  auto seg = OpenGroup();
  testing::LedgerLock::SetDeadline(*seg, kShortDeadlineNs);
  const int d = *seg->AttachDevice(kUuid);
  const int mine = *seg->Join(getpid(), 1, "parent");
  ASSERT_TRUE(seg->ledger().Reserve(mine, d, 10 * kMiB));
  InChildThenKill([&] {
    // Dies holding the lock, having left the slots' sum above the group's
    // count (which the ledger's own steps never do: invariant 1).
    const testing::LedgerLock::Hold hold(*seg);
    testing::RawLayout(*seg).slots[mine].memory[d] += 7 * kMiB;
    raise(SIGKILL);  // inside the hold
  });
  // Reservations take no lock: not wedged.
  EXPECT_TRUE(seg->ledger().Reserve(mine, d, 1 * kMiB));
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 11 * kMiB);
  // The next locker (here: a new device) evicts the dead holder once the
  // deadline has passed, and repairs the ledger first.
  ASSERT_TRUE(seg->AttachDevice("GPU-00000000-1111-2222-3333-555555555555").ok());
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 18 * kMiB);
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
}

// Fault: a tenant (its own process and mapping) is killed while it holds the
// ledger lock, half way through leaving: its slot's bytes are gone but the
// group's count still holds them. The next locker evicts the dead holder
// once the deadline has passed instead of hanging; the dead member's slot is
// reclaimed; and the orphaned charge, which no live member may lower while
// charges can be in flight, is dropped once no member is left, so the next
// tenant gets the whole limit.
TEST_F(GroupSegmentTest, ATenantKilledHoldingTheLockIsRecoveredAndItsChargeRepaired) {
  auto seg = OpenGroup();
  testing::LedgerLock::SetDeadline(*seg, kShortDeadlineNs);
  const int d = *seg->AttachDevice(kUuid);
  seg->SetMemoryLimit(d, 64 * kMiB);
  const int mine = *seg->Join(getpid(), 1, "parent");
  ASSERT_TRUE(seg->ledger().Reserve(mine, d, 10 * kMiB));
  int tenant_slot[2];
  ASSERT_EQ(pipe(tenant_slot), 0);
  InChildThenKill([&] {
    auto own = GroupSegment::Open(dir_, "g1", true);
    if (!own.ok()) _exit(1);
    const int dev = *(*own)->AttachDevice(kUuid);
    const int slot = *(*own)->Join(getpid(), 2, "tenant");
    if (!(*own)->ledger().Reserve(slot, dev, 20 * kMiB)) _exit(1);
    (void)!write(tenant_slot[1], &slot, sizeof slot);
    // ClearSlotLocked's first step (the slot's bytes), under the lock, then death.
    const testing::LedgerLock::Hold hold(**own);
    testing::RawLayout(**own).slots[slot].memory[dev] = 0;
    raise(SIGKILL);  // here, with the segment still mapped (not after `own` unmaps it)
  });
  int slot = -1;
  ASSERT_EQ(read(tenant_slot[0], &slot, sizeof slot), static_cast<ssize_t>(sizeof slot));
  close(tenant_slot[0]);
  close(tenant_slot[1]);
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 30 * kMiB);
  // The dead holder is reaped under the lock taken from it (this would hang
  // on a lock no one can take back); its 20 MiB stay counted while a member
  // lives.
  EXPECT_EQ(seg->ReapDead(), 1);
  EXPECT_EQ(testing::RawLayout(*seg).slots[slot].owner_pid, 0);
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 30 * kMiB);
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
  {
    const testing::LedgerLock::Hold again(*seg);  // free again: taken at once
    EXPECT_TRUE(again.held());
  }
  EXPECT_EQ(testing::RawLayout(*seg).ledger_lock, 0u);
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
  // The last member leaves: the orphaned charge goes with it.
  seg->ledger().Release(mine, d, 10 * kMiB);
  seg->Leave(mine);
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 0u);
  const int next = *seg->Join(getpid(), 3, "next");
  EXPECT_TRUE(seg->ledger().Reserve(next, d, 64 * kMiB));
}

// A member stopped (SIGSTOP: hostile, or under a debugger) while it holds
// the ledger lock: what an allocation does when it needs the lock (reaping a
// dead member to make room), a join and a device attach all complete once
// the deadline has passed; the holder is evicted once and the ledger is
// consistent. When the stopped member resumes, its release frees nothing: a
// hold taken after the eviction stays held, and a locker waiting for that
// hold keeps waiting for it.
TEST_F(GroupSegmentTest, AMemberStoppedHoldingTheLedgerLockIsEvictedAndItsLateReleaseFreesNothing) {
  auto seg = OpenGroup();
  testing::LedgerLock::SetDeadline(*seg, kStoppedDeadlineNs);
  const int d = *seg->AttachDevice(kUuid);
  seg->SetMemoryLimit(d, 64 * kMiB);
  const int mine = *seg->Join(getpid(), 1, "parent");
  ASSERT_TRUE(seg->ledger().Reserve(mine, d, 10 * kMiB));
  int joined[2], go[2];
  ASSERT_EQ(pipe(joined), 0);
  ASSERT_EQ(pipe(go), 0);
  Child child(fork());
  ASSERT_GE(child.pid, 0);
  if (child.pid == 0) {
    auto own = GroupSegment::Open(dir_, "g1", true);
    if (!own.ok()) _exit(1);
    const auto dev = (*own)->AttachDevice(kUuid);
    const auto slot = (*own)->Join(getpid(), 3, "stopped");
    if (!dev.ok() || !slot.ok() || !(*own)->ledger().Reserve(*slot, *dev, 20 * kMiB)) _exit(2);
    char c = 1;
    if (write(joined[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(2);
    int code = 0;
    {
      const testing::LedgerLock::Hold hold(**own);
      raise(SIGSTOP);
      code = hold.held() ? 3 : 0;  // 3: not evicted while stopped
    }                              // its late release
    _exit(code);
  }
  char c = 0;
  ASSERT_EQ(read(joined[0], &c, 1), 1);
  InChildThenKill([&] {  // a dead member whose 30 MiB only reaping gives back
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    auto s = seg->Join(getpid(), 2, "dead");
    if (!s.ok() || !seg->ledger().Reserve(*s, d, 30 * kMiB)) _exit(1);
  });
  ASSERT_EQ(write(go[1], &c, 1), 1);
  for (int fd : {joined[0], joined[1], go[0], go[1]}) close(fd);
  int status = 0;
  ASSERT_EQ(waitpid(child.pid, &status, WUNTRACED), child.pid);
  if (!WIFSTOPPED(status)) child.pid = -1;  // it ended (and is reaped) before it stopped
  ASSERT_TRUE(WIFSTOPPED(status)) << "the child failed first: status " << status;
  EXPECT_EQ(seg->ledger().MemoryUsed(d), 60 * kMiB);

  // Over the limit: the reservation reaps the dead member, under the lock it
  // takes from the stopped one.
  EXPECT_TRUE(seg->ledger().Reserve(mine, d, 30 * kMiB));
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
  auto joiner = OpenGroup();
  testing::LedgerLock::SetDeadline(*joiner, kStoppedDeadlineNs);
  EXPECT_TRUE(joiner->Join(getpid(), 4, "joiner").ok());
  EXPECT_TRUE(seg->AttachDevice("GPU-00000000-1111-2222-3333-555555555555").ok());
  EXPECT_EQ(seg->ReapDead(), 0);  // a stopped member is alive
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
  EXPECT_EQ(seg->ledger().MemoryUsed(d),
            60 * kMiB);  // 40 of the parent's, 20 of the stopped member's
  EXPECT_EQ(seg->ledger().MemoryUsed(d), SlotsSum(*seg, d));

  // The parent holds the lock; a third locker (a thread with a handle of its
  // own and a deadline far off) waits for it; then the stopped member resumes
  // and releases.
  auto third = OpenGroup();
  testing::LedgerLock::SetDeadline(*third, kLongDeadlineNs);
  std::atomic<bool> third_holds{false};
  std::jthread waiter;  // declared before the hold: joined after it is released
  std::optional<testing::LedgerLock::Hold> held(std::in_place, *seg);
  ASSERT_TRUE(held->held());
  const uint64_t tickets = Shared(testing::RawLayout(*seg).ledger_tickets);
  waiter = std::jthread([&] {
    const testing::LedgerLock::Hold hold(*third);
    third_holds = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return Shared(testing::RawLayout(*seg).ledger_tickets) > tickets; }));
  ASSERT_EQ(kill(child.pid, SIGCONT), 0);
  ASSERT_EQ(waitpid(child.pid, &status, 0), child.pid);
  child.pid = -1;
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1, 2: its setup failed; 3: it was not evicted";
  EXPECT_TRUE(held->held());  // the stopped member's release did not free it
  EXPECT_FALSE(third_holds.load());
  held.reset();
  waiter.join();
  EXPECT_TRUE(third_holds.load());
  EXPECT_EQ(Shared(testing::RawLayout(*seg).ledger_lock), 0u);
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 1u);
}

// Within its deadline a holder is waited for, not evicted: a locker that
// waits behind it gets the lock when it is released, and nothing is counted.
// The holder keeps the lock for twice the default deadline (which a locker
// that ignored its own, far longer, one would have evicted it after).
TEST_F(GroupSegmentTest, ALockerWaitsForAHolderWithinTheDeadlineAndEvictsNoOne) {
  auto seg = OpenGroup();
  auto other = OpenGroup();
  testing::LedgerLock::SetDeadline(*other, kLongDeadlineNs);
  std::atomic<bool> waiter_holds{false};
  std::jthread waiter;  // declared before the hold: joined after it is released
  std::optional<testing::LedgerLock::Hold> held(std::in_place, *seg);
  const uint64_t tickets = Shared(testing::RawLayout(*seg).ledger_tickets);
  waiter = std::jthread([&] {
    const testing::LedgerLock::Hold hold(*other);
    waiter_holds = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return Shared(testing::RawLayout(*seg).ledger_tickets) > tickets; }));
  const int64_t until = MonotonicNs() + 2 * kLedgerLockDeadlineNs;
  while (MonotonicNs() < until) {
    ASSERT_TRUE(held->held());
    ASSERT_FALSE(waiter_holds.load());
    ASSERT_EQ(seg->Snapshot().ledger_evictions, 0u);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  held.reset();
  waiter.join();
  EXPECT_TRUE(waiter_holds.load());
  EXPECT_EQ(seg->Snapshot().ledger_evictions, 0u);
  EXPECT_EQ(Shared(testing::RawLayout(*seg).ledger_lock), 0u);
}

// Several processes of several threads fill the group to its limit and free
// again, on the lock-free path: the count never passes the limit (its peak
// says so), the quota does fill, and every byte comes back.
TEST_F(GroupSegmentTest, ACorruptSegmentIsReinitialisedNotTrusted) {
  {
    auto seg = OpenGroup();
    const int d = *seg->AttachDevice(kUuid);
    seg->LowerMemoryLimit(d, 5 * kMiB);
    testing::RawLayout(*seg).header.magic = 0xdeadbeef;
  }
  auto seg = OpenGroup();
  EXPECT_EQ(testing::RawLayout(*seg).header.magic, kGroupSegmentMagic);
  EXPECT_EQ(seg->device_count(), 0);
  // A file of the wrong size is rebuilt too, and refused to readers.
  const std::string path = GroupSegment::PathFor(dir_, "g2");
  int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "garbage", 7), 7);
  close(fd);
  EXPECT_EQ(GroupSegment::Open(dir_, "g2", false).status().code(), StatusCode::kFailedPrecondition);
  auto rebuilt = GroupSegment::Open(dir_, "g2", true);
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_STREQ(testing::RawLayout(**rebuilt).group, "g2");
}

TEST_F(GroupSegmentTest, SlotsRunOutClearly) {
  auto seg = OpenGroup();
  // Every slot held by other open file descriptions of this process.
  std::vector<std::unique_ptr<GroupSegment>> members;
  for (int i = 0; i < kGroupMaxSlots; ++i) {
    members.push_back(OpenGroup());
    ASSERT_TRUE(members.back()->Join(getpid(), 1, "m").ok());
  }
  auto s = seg->Join(getpid(), 1, "late");
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find("no free process slot"), std::string::npos);
  members.pop_back();  // one member leaves (its handle closes)
  EXPECT_TRUE(seg->Join(getpid(), 1, "late").ok());
}

TEST_F(GroupSegmentTest, AnAttachedGroupIsNeverCollected) {
  auto member = OpenGroup();
  const int64_t alive = member->LastAliveNs();
  // Far past any grace period, but a process (this one) is attached.
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, alive + 3'600'000'000'000);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_FALSE(*removed);
  EXPECT_EQ(GroupSegment::ListGroups(dir_), std::vector<std::string>{"g1"});
  // Observers do not attach: they keep nothing alive and see the member.
  auto observer = GroupSegment::Open(dir_, "g1", false);
  ASSERT_TRUE(observer.ok());
  EXPECT_TRUE((*observer)->HasAttachedProcess());
}

TEST_F(GroupSegmentTest, AnAbandonedGroupIsCollectedOnlyAfterItsGrace) {
  int64_t last_alive = 0;
  {
    auto member = OpenGroup();
    member->control().Beat(member->LastAliveNs() + 5'000'000'000);  // a controller beat 5 s in
    last_alive = member->LastAliveNs();
  }  // the member exits
  auto observer = GroupSegment::Open(dir_, "g1", false);
  ASSERT_TRUE(observer.ok());
  EXPECT_FALSE((*observer)->HasAttachedProcess());
  EXPECT_EQ((*observer)->LastAliveNs(), last_alive);
  constexpr int64_t kGrace = 600'000'000'000;
  auto kept = GroupSegment::RemoveIfAbandoned(dir_, "g1", kGrace, last_alive + kGrace - 1);
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(*kept);
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "g1", kGrace, last_alive + kGrace);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
  EXPECT_TRUE(GroupSegment::ListGroups(dir_).empty());
  auto again = GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, last_alive + kGrace);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);  // already gone
}

TEST_F(GroupSegmentTest, AMemberKilledBySigkillNoLongerKeepsItsGroup) {
  InChildThenKill([&] {
    auto seg = GroupSegment::Open(dir_, "g1", true);
    if (!seg.ok() || !(*seg)->Join(getpid(), 1, "child").ok()) _exit(1);
  });
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, MonotonicNs());
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
}

TEST_F(GroupSegmentTest, AForkedMemberKeepsTheGroupAfterItsParentLeaves) {
  auto seg = OpenGroup();
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    char c = 1;
    if (write(ready[1], &c, 1) != 1 || read(release[0], &c, 1) != 1) _exit(1);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  seg.reset();  // the parent's handle closes; the child's stays attached
  auto kept = GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, MonotonicNs());
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(*kept);
  ASSERT_EQ(write(release[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, MonotonicNs());
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
  for (int fd : {ready[0], ready[1], release[0], release[1]}) close(fd);
}

TEST_F(GroupSegmentTest, AttachersRacingTheCollectorNeverShareAnUnlinkedFile) {
  // Members come and go while a collector with no grace sweeps: every member
  // must end up in the file the path names (never in an unlinked one). An
  // opener the collector beats eight times in a row (a loaded machine
  // deschedules it between creating and attaching) is told Unavailable and
  // tries again: that is the contract, not a shared unlinked file.
  std::jthread collector([&](const std::stop_token& stop) {
    while (!stop.stop_requested()) {
      (void)GroupSegment::RemoveIfAbandoned(dir_, "g1", 0, MonotonicNs());
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int attached = 0;
  while (attached < 300) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << attached << " of 300 attached";
    auto opened = GroupSegment::Open(dir_, "g1", true);
    if (!opened.ok()) {
      ASSERT_EQ(opened.status().code(), StatusCode::kUnavailable) << opened.status().ToString();
      continue;
    }
    ++attached;
    std::unique_ptr<GroupSegment> seg = std::move(opened).value();
    struct stat by_path {
    }, by_handle{};
    ASSERT_EQ(stat(seg->path().c_str(), &by_path), 0) << "attached segment was removed";
    const int fd = open(seg->path().c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fstat(fd, &by_handle), 0);
    close(fd);
    EXPECT_EQ(by_path.st_ino, by_handle.st_ino);
    EXPECT_TRUE(seg->Join(getpid(), 1, "m").ok());
  }
}

TEST_F(GroupSegmentTest, AFileThatIsNotASegmentIsCollectedAtOnce) {
  const std::string path = GroupSegment::PathFor(dir_, "junk");
  int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "garbage", 7), 7);
  close(fd);
  auto removed = GroupSegment::RemoveIfAbandoned(dir_, "junk", 600'000'000'000, 0);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
}

TEST_F(GroupSegmentTest, ASegmentIsForItsCreatorsUidAndGidOnly) {
  auto seg = OpenGroup();
  ASSERT_NE(seg, nullptr);
  struct stat st {};
  ASSERT_EQ(stat(seg->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST_F(GroupSegmentTest, AnotherUserCanNeitherOpenAGroupNorSquatItsName) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as uid 65534";
  ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);
  auto seg = OpenGroup("owned");
  ASSERT_NE(seg, nullptr);
  // uid 65534 cannot open it, to read or to join.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    auto r = GroupSegment::Open(dir_, "owned", false);
    auto w = GroupSegment::Open(dir_, "owned", true);
    const bool refused = r.status().code() == StatusCode::kPermissionDenied &&
                         w.status().code() == StatusCode::kPermissionDenied &&
                         r.status().message().find("uid 0") != std::string::npos;
    _exit(refused ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(WEXITSTATUS(status), 0);

  // A file another user left, writable by anyone, is not joined.
  const std::string squat = GroupSegment::PathFor(dir_, "squatted");
  int fd = open(squat.c_str(), O_CREAT | O_WRONLY, 0666);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchmod(fd, 0666), 0);
  ASSERT_EQ(fchown(fd, 65534, 65534), 0);
  close(fd);
  auto joined = GroupSegment::Open(dir_, "squatted", true);
  EXPECT_EQ(joined.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(joined.status().message().find("anyone may write"), std::string::npos)
      << joined.status().message();
}

}  // namespace
}  // namespace gpuslice::segment_test
