// TenantRoutesFixture: the tenant routes over a registry on a fake /proc and
// a fake GPU backend of two GPUs, called in-process (no HTTP). Processes 100
// and 101 are one pod's (uid 1000, container pids 1 and 7; 100 carries
// POD_NAME/POD_NAMESPACE hints); 300 is uid 65534 in no pod. A test's SetUp
// adds what else it needs, then calls Install(options).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "daemon/api/tenant_routes.h"
#include "daemon/gpu/fake_backend.h"
#include "daemon/tenants/fake_proc.h"

namespace gpuslice::daemon {

class TenantRoutesFixture : public ::testing::Test {
 protected:
  using json = nlohmann::json;
  static constexpr const char* kPod = "aaaaaaaa-1111-2222-3333-444444444444";

  TenantRoutesFixture() {
    using namespace std::string_literals;
    const std::string cgroup = "0::/kubepods/pod"s + kPod + "/" + std::string(64, 'a') + "\n";
    proc_.Add(100, "100\t1", 1000, 11, cgroup, "POD_NAME=web-0\0POD_NAMESPACE=prod\0"s);
    proc_.Add(101, "101\t7", 1000, 12, cgroup);
    proc_.Add(300, "300", 65534, 31, "0::/user.slice/user-65534.slice/s.scope\n");
    monitor_.Sample();
  }

  // Adds the routes with `options` (proc_root is this fixture's).
  void Install(TenantRoutesOptions options) {
    options.proc_root = proc_.root();
    AddTenantRoutes(router_, registry_, monitor_, usage_, options);
  }

  ApiResponse Call(const std::string& method, const std::string& path, const std::string& body,
                   const Caller& caller = Root(), std::map<std::string, std::string> query = {}) {
    auto m = router_.Find(method, path);
    if (!m.ok()) return ApiResponse::FromStatus(m.status());
    ApiRequest req{method, path, std::move(query), m->params, body, caller};
    return (*m->handler)(req);
  }
  static Caller Unix(pid_t pid, uid_t uid) { return Caller{uid, uid, pid, false, false}; }
  static Caller Root() { return Caller{0, 0, 1, false, false}; }
  static json Body(const ApiResponse& r) { return json::parse(r.body); }
  std::vector<std::string> EventTypes() const {
    std::vector<std::string> out;
    for (const auto& [type, data] : events_) out.push_back(type);
    return out;
  }

  FakeProc proc_;
  FakeBackend backend_{2};
  SimulatedClock clock_;
  FakeWatcher watcher_;
  std::vector<std::pair<std::string, json>> events_;
  TenantRegistry registry_{TenantRegistry::Options{proc_.root()}, clock_, watcher_, nullptr,
                           [this](std::string_view type, const json& data) {
                             events_.emplace_back(std::string(type), data);
                           }};
  GpuMonitor monitor_{backend_, std::chrono::milliseconds(1000)};
  GpuUsageCache usage_;
  ApiRouter router_;
};

}  // namespace gpuslice::daemon
