#include "limiter/registrar.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace gpuslice::limiter {
namespace {

using Outcome = RegistrationResult::Outcome;
using State = Registrar::State;

constexpr int64_t kSecond = 1'000'000'000;

// A daemon as the registrar sees it: what it observes and what each send
// answers, on simulated time.
class RegistrarTest : public ::testing::Test {
 protected:
  RegistrarTest()
      : registrar_(
            Request(),
            [this](const RegistrationRequest& r) {
              sent_.push_back(r.group);
              return answer_;
            },
            [this] { return seen_; },
            [this](const std::vector<EffectiveLimit>& l) { applied_.push_back(l); }, clock_) {}

  static RegistrationRequest Request() {
    RegistrationRequest r;
    r.group = "g";
    r.devices = {"GPU-1"};
    return r;
  }

  // Steps the registrar at every due time until `until_ns` (absolute).
  void RunUntil(int64_t until_ns) {
    while (clock_.NowNs() < until_ns) {
      const int64_t wait = registrar_.Step();
      ASSERT_GT(wait, 0);
      clock_.Advance(std::min(wait, until_ns - clock_.NowNs()));
    }
  }

  static RegistrationResult Answer(Outcome o, int status = 0) {
    RegistrationResult r;
    r.outcome = o;
    r.http_status = status;
    return r;
  }

  SimulatedClock clock_{100 * kSecond};
  DaemonObservation seen_{.socket_present = true, .socket_id = 11, .daemon_pid = 0};
  RegistrationResult answer_ = Answer(Outcome::kRegistered, 201);
  std::vector<std::string> sent_;
  std::vector<std::vector<EffectiveLimit>> applied_;
  Registrar registrar_;
};

TEST_F(RegistrarTest, NothingIsSentWithoutASocket) {
  seen_.socket_present = false;
  RunUntil(clock_.NowNs() + 10 * kSecond);
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(registrar_.state(), State::kUnregistered);
  // The socket appears: registered on the next look (within a retry period).
  seen_.socket_present = true;
  const int64_t appeared = clock_.NowNs();
  while (sent_.empty()) RunUntil(clock_.NowNs() + 1);
  EXPECT_LE(clock_.NowNs() - appeared, 2 * kSecond);
  EXPECT_EQ(registrar_.state(), State::kRegistered);
}

TEST_F(RegistrarTest, RegistersAtOnceAndAppliesTheGrant) {
  EffectiveLimit grant{"GPU-1", 1024, 30};
  answer_.effective_limits = {grant};
  registrar_.Step();
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(registrar_.state(), State::kRegistered);
  ASSERT_EQ(applied_.size(), 1u);
  EXPECT_EQ(applied_[0][0].memory_bytes, 1024u);
  // Same daemon: never again.
  RunUntil(clock_.NowNs() + 60 * kSecond);
  EXPECT_EQ(sent_.size(), 1u);
}

TEST_F(RegistrarTest, RetriesEveryTwoSecondsWhileTheDaemonDoesNotAnswer) {
  answer_ = Answer(Outcome::kUnavailable);
  const int64_t start = clock_.NowNs();
  RunUntil(start + 2 * kSecond - 1);
  EXPECT_EQ(sent_.size(), 1u);  // at once, and not again before 2 s
  RunUntil(start + 10 * kSecond + 1);
  EXPECT_EQ(sent_.size(), 6u);  // 0, 2, 4, 6, 8, 10 s
  EXPECT_EQ(applied_.size(), 0u);
  answer_ = Answer(Outcome::kRegistered, 201);
  RunUntil(start + 13 * kSecond);
  EXPECT_EQ(sent_.size(), 7u);
  EXPECT_EQ(registrar_.state(), State::kRegistered);
}

TEST_F(RegistrarTest, ARestartedDaemonGetsANewRegistration) {
  registrar_.Step();
  ASSERT_EQ(registrar_.state(), State::kRegistered);
  // The daemon claims the group: it is the one that answered.
  seen_.daemon_pid = 500;
  RunUntil(clock_.NowNs() + 5 * kSecond);
  EXPECT_EQ(sent_.size(), 1u);

  // SIGKILLed and restarted: a new socket file.
  seen_.socket_id = 12;
  const int64_t restarted = clock_.NowNs();
  RunUntil(restarted + 2 * kSecond);
  EXPECT_EQ(sent_.size(), 2u);
  EXPECT_EQ(registrar_.state(), State::kRegistered);

  // Another daemon pid claims the group (same socket file: e.g. its inode
  // was reused): registered again too.
  seen_.daemon_pid = 501;
  RunUntil(clock_.NowNs() + 2 * kSecond);
  EXPECT_EQ(sent_.size(), 3u);
  RunUntil(clock_.NowNs() + 10 * kSecond);
  EXPECT_EQ(sent_.size(), 3u);
}

TEST_F(RegistrarTest, A409CountsAsRegistered) {
  answer_ = Answer(Outcome::kRegistered, 409);
  registrar_.Step();
  EXPECT_EQ(registrar_.state(), State::kRegistered);
  RunUntil(clock_.NowNs() + 10 * kSecond);
  EXPECT_EQ(sent_.size(), 1u);
}

TEST_F(RegistrarTest, ARefusalIsNotRetriedWithTheSameDaemon) {
  answer_ = Answer(Outcome::kRefused, 403);
  RunUntil(clock_.NowNs() + 30 * kSecond);
  EXPECT_EQ(sent_.size(), 1u);
  EXPECT_EQ(registrar_.state(), State::kRefused);
  EXPECT_TRUE(applied_.empty());
  // A new daemon may think otherwise.
  seen_.socket_id = 12;
  answer_ = Answer(Outcome::kRegistered, 201);
  RunUntil(clock_.NowNs() + 2 * kSecond);
  EXPECT_EQ(sent_.size(), 2u);
  EXPECT_EQ(registrar_.state(), State::kRegistered);
}

TEST_F(RegistrarTest, TheSocketGoingAwayUnregistersAndItsReturnRegisters) {
  registrar_.Step();
  ASSERT_EQ(registrar_.state(), State::kRegistered);
  seen_.socket_present = false;  // a daemon that stopped cleanly removes its socket
  RunUntil(clock_.NowNs() + 5 * kSecond);
  EXPECT_EQ(registrar_.state(), State::kUnregistered);
  EXPECT_EQ(sent_.size(), 1u);
  seen_.socket_present = true;  // same identity is possible: registered anyway
  RunUntil(clock_.NowNs() + 2 * kSecond + 1);
  EXPECT_EQ(sent_.size(), 2u);
  EXPECT_EQ(registrar_.state(), State::kRegistered);
}

}  // namespace
}  // namespace gpuslice::limiter
