// Waiting for a gpusliced started by a test to serve its API.
#pragma once

#include <chrono>
#include <string>

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

}  // namespace gpuslice::testing
