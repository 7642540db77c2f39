// Test doubles for the tenant registry, header-only: FakeProc, a fake /proc
// tree in a temporary directory (for code that takes a proc root), and
// FakeWatcher, liveness in the test's hands.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "daemon/api/api.h"
#include "daemon/tenants/pid_watcher.h"

namespace gpuslice::daemon {

class FakeProc {
 public:
  FakeProc() {
    root_ = ::testing::TempDir() + "/fakeproc." + std::to_string(getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  ~FakeProc() { std::filesystem::remove_all(root_); }
  FakeProc(const FakeProc&) = delete;
  FakeProc& operator=(const FakeProc&) = delete;

  // Process `pid` with NSpid line `nspid` ("4242\t1"), effective uid `uid`,
  // start time `start`, /proc/<pid>/cgroup text `cgroup` and environ `environ`.
  void Add(pid_t pid, const std::string& nspid, uid_t uid, uint64_t start,
           const std::string& cgroup, const std::string& environ = "") const {
    const std::string dir = root_ + "/" + std::to_string(pid);
    std::filesystem::create_directories(dir);
    const std::string u = std::to_string(uid);
    Write(dir + "/status", "Name:\tworker\nUid:\t" + u + "\t" + u + "\t" + u + "\t" + u +
                               "\nNSpid:\t" + nspid + "\n");
    std::string stat = std::to_string(pid) + " (a (weird) name) S";
    for (int f = 4; f <= 21; ++f) stat += " 0";
    stat += " " + std::to_string(start) + " 0 0\n";
    Write(dir + "/stat", stat);
    Write(dir + "/cgroup", cgroup);
    Write(dir + "/environ", environ);
  }
  // A TCP socket of `pid` (added), connected from `client` to `server`
  // (IPv4), with inode `inode`, as /proc/<pid>/net/tcp lists it, and its fd 3.
  void AddTcpSocket(pid_t pid, const TcpEndpoint& client, const TcpEndpoint& server,
                    uint64_t inode) const {
    const std::string dir = root_ + "/" + std::to_string(pid);
    std::filesystem::create_directories(dir + "/net");
    std::filesystem::create_directories(dir + "/fd");
    const auto hex = [](const TcpEndpoint& e) {
      uint32_t word = 0;
      std::memcpy(&word, e.address.data(), 4);
      char text[32];
      std::snprintf(text, sizeof(text), "%08X:%04X", word, e.port);
      return std::string(text);
    };
    Write(dir + "/net/tcp",
          "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
          "timeout inode\n   0: " +
              hex(client) + " " + hex(server) +
              " 01 00000000:00000000 00:00000000 00000000  1000        0 " + std::to_string(inode) +
              " 1 0000000000000000 20 4 30 10 -1\n");
    std::filesystem::create_symlink("socket:[" + std::to_string(inode) + "]", dir + "/fd/3");
  }
  void Remove(pid_t pid) const { std::filesystem::remove_all(root_ + "/" + std::to_string(pid)); }
  const std::string& root() const { return root_; }

 private:
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  std::string root_;
};

// Watch fails for pids in `dead`; exits are the test's calls to OnExited.
class FakeWatcher final : public LivenessWatcher {
 public:
  Status Watch(pid_t pid, uint64_t /*start_time*/) override {
    if (dead.contains(pid)) return NotFound("no process " + std::to_string(pid));
    watched.insert(pid);
    return Status::Ok();
  }
  void Unwatch(pid_t pid) override { watched.erase(pid); }
  std::set<pid_t> watched, dead;
};

}  // namespace gpuslice::daemon
