// A gpusliced started by a test: waiting for it to serve its API, and calling
// that API.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "cli/unix_http_client.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice::testing {

// Waits (up to 20 s) until the daemon on `socket` answers /readyz with 200.
inline bool WaitForDaemonReady(const std::string& socket) {
  using namespace std::chrono_literals;
  return WaitFor(
      [&] {
        auto r = cli::UnixHttpClient(socket, 5s).Request("GET", "/readyz");
        return r.ok() && r->status == 200;
      },
      20s);
}

// One request to the daemon on `socket`: its status and its body parsed
// (null when not JSON); {0, null} and a test failure when it did not answer.
inline std::pair<int, nlohmann::json> CallDaemon(const std::string& socket,
                                                 const std::string& method,
                                                 const std::string& target,
                                                 const std::string& body = "") {
  using namespace std::chrono_literals;
  auto r = cli::UnixHttpClient(socket, 10s).Request(method, target, body);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {0, nullptr};
  return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
}

}  // namespace gpuslice::testing
