// The web dashboard end to end: the real gpusliced on a private simulated GPU
// (TCP listener with a token), two limited workloads in two groups, and the
// page in headless Chromium, driven by dashboard_browser.cjs (playwright-core).
// The browser side checks what a person sees (the page loads and is live, its
// charts gain points and follow the measured share, a reader gets no controls
// and is refused, an admin's form changes a limit and pauses a group); this
// side checks the result through the API and keeps the screenshot.
//
// Skipped only without chromium (scripts/setup installs it); without node or
// node_modules/playwright-core it fails, saying to run scripts/setup.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/unix_http_client.h"
#include "tests/integration/support/daemon_ready.h"
#include "tests/integration/support/free_port.h"
#include "tests/integration/support/sim_process_test.h"

namespace gpuslice {
namespace {

using nlohmann::json;
using testing::BuildDir;
using testing::FreePort;
using testing::WaitFor;
using namespace std::chrono_literals;

// `name` on $PATH (or `fallbacks`, absolute paths), or "".
std::string FindProgram(const std::string& name, const std::vector<std::string>& fallbacks = {}) {
  const char* path = getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = dir;
    candidate += '/';
    candidate += name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  for (const std::string& f : fallbacks) {
    if (access(f.c_str(), X_OK) == 0) return f;
  }
  return "";
}

// Chromium: $GPUSLICE_CHROMIUM, else Debian's on $PATH.
std::string FindChromium() {
  if (const char* env = getenv("GPUSLICE_CHROMIUM"); env != nullptr && *env != '\0') {
    return access(env, X_OK) == 0 ? env : "";
  }
  std::string c = FindProgram("chromium", {"/usr/bin/chromium"});
  return c.empty() ? FindProgram("chromium-browser") : c;
}

// Sends `request` (a whole HTTP/1.1 request) to 127.0.0.1:`port`; the status
// line of the answer, or "" when nothing answers.
std::string StatusLine(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n = 0;
    while (response.find("\r\n") == std::string::npos && (n = read(fd, buf, sizeof buf)) > 0) {
      response.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return response.substr(0, response.find("\r\n"));
}

class DashboardBrowserTest : public testing::SimProcessTest {
 protected:
  json Group(const std::string& id) {
    auto r = cli::UnixHttpClient(socket_, 5s).Request("GET", "/v1/groups/" + id);
    return r.ok() ? json::parse(r->body, nullptr, false) : json();
  }

  std::string socket_;
  int next_ = 0;
};

TEST_F(DashboardBrowserTest, ThePageIsLiveAndOnlyAnAdminChangesALimit) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium is not installed (scripts/setup installs Debian's chromium; or set "
                    "GPUSLICE_CHROMIUM)";
  }
  const std::string node = FindProgram("node");
  ASSERT_FALSE(node.empty()) << "node is not on PATH: install Node.js 20 or later, then run "
                                "scripts/setup";
  const std::string source = GPUSLICE_SOURCE_DIR;
  ASSERT_TRUE(std::filesystem::exists(source + "/node_modules/playwright-core/package.json"))
      << source << "/node_modules/playwright-core is missing: run scripts/setup (npm ci)";

  // The daemon, on its Unix socket and on loopback TCP with a token.
  socket_ = dir_ + "/d.sock";
  const std::string token = "dashboard-test-" + std::to_string(getpid());
  std::ofstream(dir_ + "/tokens") << token << "\n";
  const int port = FreePort();
  StartProgram("gpusliced", next_++,
               {"--socket", socket_, "--state-dir", dir_ + "/state", "--shm-dir", shm_dir_,
                "--poll-interval-ms", "100", "--listen-tcp", "127.0.0.1:" + std::to_string(port),
                "--token-file", dir_ + "/tokens"});
  ASSERT_TRUE(testing::WaitForDaemonReady(socket_)) << Read("err0");

  // Two groups at work: "train" held to 40%, "notebook" to 20% and 1 GiB.
  const std::vector<std::string> env = {"LD_PRELOAD=" + BuildDir() + "/lib/libgpuslice.so",
                                        "GPUSLICE_SHM_DIR=" + shm_dir_,
                                        "GPUSLICE_SOCKET=" + socket_};
  auto workload = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), env.begin(), env.end());
    Start(next_++, {"--kernel-us", "2000", "--duration-s", "120", "--quiet"}, extra);
  };
  workload({"GPUSLICE_GROUP=train", "GPUSLICE_COMPUTE_LIMIT=40"});
  workload({"GPUSLICE_GROUP=notebook", "GPUSLICE_COMPUTE_LIMIT=20", "GPUSLICE_MEMORY_LIMIT=1GiB"});
  ASSERT_TRUE(WaitFor(
      [&] {
        const json t = Group("train"), n = Group("notebook");
        return t.is_object() && n.is_object() && t.value("members", json::array()).size() == 1 &&
               n.value("members", json::array()).size() == 1;
      },
      20s))
      << Group("train").dump() << "\n"
      << Read("err0");

  // The browser session; it saves the screenshot last.
  const std::filesystem::path artefacts = std::filesystem::path(BuildDir()) / "test-artifacts";
  std::filesystem::create_directories(artefacts);
  const std::string screenshot = (artefacts / "dashboard.png").string();
  std::filesystem::remove(screenshot);
  const int browser_log = next_++;
  const pid_t browser =
      Spawn(browser_log,
            {node, source + "/tests/integration/dashboard/dashboard_browser.cjs", "--url",
             "http://127.0.0.1:" + std::to_string(port), "--token", token, "--chromium", chromium,
             "--screenshot", screenshot, "--group", "train", "--limit", "25"},
            {"PATH=/usr/bin:/bin", "HOME=" + dir_, "XDG_CONFIG_HOME=" + dir_ + "/xdg",
             "XDG_CACHE_HOME=" + dir_ + "/xdg"});
  const int rc = Join(browser);
  const std::string out = Read("out" + std::to_string(browser_log));
  const std::string err = Read("err" + std::to_string(browser_log));
  std::cout << out;
  ASSERT_EQ(rc, 0) << "the browser checks failed:\n" << out << err;

  // What the admin's form did, through the API: the group's limit, and the
  // scheduler's limit on its GPU.
  const json train = Group("train");
  EXPECT_EQ(train["limits"]["all"]["compute_percent"], 25) << train.dump();
  ASSERT_FALSE(train["gpus"].empty()) << train.dump();
  EXPECT_EQ(train["gpus"][0]["schedule"]["limit"], 25) << train.dump();
  EXPECT_EQ(train["paused"], false);  // paused and resumed again
  // A page of another site cannot use a browser that holds the token (or
  // reaches the socket through a forward) to change settings: the daemon
  // refuses a request whose Origin is not its own host, token or not.
  const std::string host = "127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(StatusLine(port, "POST /v1/groups/notebook/pause HTTP/1.1\r\nHost: " + host +
                                 "\r\nOrigin: http://evil.example\r\nAuthorization: Bearer " +
                                 token + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
            "HTTP/1.1 403 Forbidden");
  // Nothing else changed: notebook as it was.
  const json notebook = Group("notebook");
  EXPECT_EQ(notebook["paused"], false);
  EXPECT_TRUE(notebook["limits"].empty()) << notebook.dump();

  // The screenshot, kept in the build tree as the test's artefact.
  std::ifstream png(screenshot, std::ios::binary);
  std::string magic(8, '\0');
  png.read(magic.data(), 8);
  EXPECT_EQ(magic, std::string("\x89PNG\r\n\x1a\n", 8)) << screenshot;
  EXPECT_GT(std::filesystem::file_size(screenshot), 20'000u);
  std::cout << "dashboard screenshot: " << screenshot << "\n";
}

}  // namespace
}  // namespace gpuslice
