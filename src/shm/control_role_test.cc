#include "shm/control_role.h"

#include "shm/group_segment_test_fixture.h"

namespace gpuslice::segment_test {
namespace {

class ControlRoleTest : public SegmentTest {};

TEST_F(ControlRoleTest, TheControllerRolePassesWhenItsHolderDies) {
  auto seg = OpenGroup();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!seg->ReopenAfterFork().ok() || !seg->control().TryBecomeController()) _exit(1);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_FALSE(seg->control().TryBecomeController());
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(seg->control().WaitToBecomeController().ok());  // returns at once: the lock is free
  EXPECT_EQ(testing::RawLayout(*seg).controller_pid, getpid());
  close(ready[0]);
  close(ready[1]);
}

TEST_F(ControlRoleTest, AForkedChildHoldsNoneOfItsParentsRole) {
  auto seg = OpenGroup();
  ASSERT_TRUE(seg->control().TryBecomeController());
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!seg->ReopenAfterFork().ok()) _exit(1);
    if (seg->control().is_controller()) _exit(2);        // the parent's role stayed with it
    if (seg->control().TryBecomeController()) _exit(3);  // and the parent still holds the lock
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(seg->control().is_controller());

  seg->control().ResignController();
  EXPECT_FALSE(seg->control().is_controller());
  EXPECT_EQ(testing::RawLayout(*seg).controller_pid, 0);
  auto other = OpenGroup();
  EXPECT_TRUE(other->control().TryBecomeController());  // the lock is free again
}

TEST_F(ControlRoleTest, TheDaemonClaimsTheGroupUntilItsBeatIsStaleOrItEndsTheClaim) {
  auto seg = OpenGroup();
  const int64_t t = 1'000'000'000'000;
  EXPECT_FALSE(seg->control().DaemonClaims(t));
  seg->control().BeatAsDaemon(4321, t);
  EXPECT_TRUE(seg->control().DaemonClaims(t + kDaemonStaleNs - 1));
  EXPECT_FALSE(seg->control().DaemonClaims(t + kDaemonStaleNs));
  seg->control().EndDaemonClaim(1234);  // not the claimant's pid: nothing ends
  EXPECT_TRUE(seg->control().DaemonClaims(t));
  seg->control().EndDaemonClaim(4321);
  EXPECT_FALSE(seg->control().DaemonClaims(t));
}

TEST_F(ControlRoleTest, TheControllerIsTheDaemonOnlyWhenTheClaimantHoldsTheRole) {
  auto seg = OpenGroup();
  ASSERT_TRUE(seg->control().TryBecomeController());
  EXPECT_FALSE(seg->control().ControllerIsDaemon());  // no claim
  seg->control().BeatAsDaemon(getpid() + 1, 1);
  EXPECT_FALSE(seg->control().ControllerIsDaemon());  // another process claims
  seg->control().BeatAsDaemon(getpid(), 1);
  EXPECT_TRUE(seg->control().ControllerIsDaemon());
}

}  // namespace
}  // namespace gpuslice::segment_test
