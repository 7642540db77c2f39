// The tenant registry's unit-test fixture, shared by registry_test.cc and
// registry_schedule_test.cc: a TenantRegistry over a fake /proc (FakeProc),
// liveness in the test's hands (FakeWatcher), simulated time, a state
// directory of its own (removed after the test), and the events it emits.
//
// Tenants staged by SetUp: 100 and 101 in pod A (uid 1000, 100 with a
// POD_NAME hint), 200 in pod B (uid 1000), 300 a plain process of uid 65534,
// 301 a plain process of uid 1000.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/tenants/fake_proc.h"
#include "daemon/tenants/registry.h"

namespace gpuslice::daemon::testing {

inline constexpr const char* kPodA = "aaaaaaaa-1111-2222-3333-444444444444";
inline constexpr const char* kPodB = "bbbbbbbb-1111-2222-3333-444444444444";

class RegistryFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    using namespace std::string_literals;
    state_dir_ = proc_.root() + "-state";
    std::filesystem::remove_all(state_dir_);
    store_ = std::move(StateStore::Open(state_dir_).value());
    registry_ = MakeRegistry();
    proc_.Add(100, "100\t1", 1000, 11, Cgroup(kPodA, "1"), "POD_NAME=a-0\0"s);
    proc_.Add(101, "101\t2", 1000, 12, Cgroup(kPodA, "2"));
    proc_.Add(200, "200\t1", 1000, 21, Cgroup(kPodB, "3"));
    proc_.Add(300, "300", 65534, 31, "0::/user.slice/user-65534.slice/session-1.scope\n");
    proc_.Add(301, "301", 1000, 32, "0::/user.slice/user-1000.slice/session-2.scope\n");
  }
  void TearDown() override { std::filesystem::remove_all(state_dir_); }

  // The /proc/<pid>/cgroup text of container `id` (its first character
  // repeated) in pod `pod`.
  static std::string Cgroup(const char* pod, const std::string& id) {
    return std::string("0::/kubepods/pod") + pod + "/" + std::string(64, id[0]) + "\n";
  }
  // A registry over this fixture's /proc, clock, watcher and store, its
  // events recorded in events_; it asks node_gpus_ for the node's GPUs when
  // the test set them.
  std::unique_ptr<TenantRegistry> MakeRegistry() {
    auto r = std::make_unique<TenantRegistry>(
        TenantRegistry::Options{proc_.root()}, clock_, watcher_, store_.get(),
        [this](std::string_view type, const nlohmann::json& data) {
          events_.emplace_back(std::string(type), data);
        });
    if (node_gpus_.has_value()) r->SetNodeGpus([this] { return *node_gpus_; });
    return r;
  }
  // A registration of `pid` (uid `uid`) in `group` on GPU-0 and GPU-1.
  static Registration Reg(pid_t pid, uid_t uid, const std::string& group) {
    Registration r;
    r.pid = pid;
    r.uid = uid;
    r.group = group;
    r.devices = {"GPU-0", "GPU-1"};
    return r;
  }
  std::vector<std::string> EventTypes() const {
    std::vector<std::string> out;
    out.reserve(events_.size());
    for (const auto& [type, data] : events_) out.push_back(type);
    return out;
  }

  FakeProc proc_;
  SimulatedClock clock_{1'000};
  FakeWatcher watcher_;
  // Set before SetUp (in the test's constructor) for MakeRegistry to pass on.
  std::optional<std::vector<std::string>> node_gpus_;
  std::string state_dir_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<TenantRegistry> registry_;
  std::vector<std::pair<std::string, nlohmann::json>> events_;
};

}  // namespace gpuslice::daemon::testing
