// gpuslice-bench-registry: the tenant registry under load (issue 12). Forks
// --processes real processes spread over --groups groups; each registers
// itself with POST /v1/tenants (the daemon identifies it by SO_PEERCRED, so
// every tenant must be its own process) and stays alive. Then it measures
// GET /v1/tenants with all of them registered, the daemon's CPU while it
// holds them (per controller tick, from /proc/<daemon>/stat), and how long
// the daemon takes to notice that all of them exited.
//
//   gpuslice-bench-registry --socket S --daemon-pid P [--groups 200]
//       [--processes 1000] [--gets 200] [--idle-s 5] [--tick-ms 50]
// bench/registry starts a daemon on the simulated GPU and runs this.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/unix_http_client.h"
#include "shm/group_segment.h"

namespace {

using Clock = std::chrono::steady_clock;
using gpuslice::cli::UnixHttpClient;

int64_t Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(std::lround(p * static_cast<double>(v.size() - 1)));
  return v[std::min(i, v.size() - 1)];
}

// utime + stime of `pid`, in clock ticks; -1 if unreadable.
int64_t CpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(text.substr(paren + 2));
  std::string f;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoll(f);
    if (i == 15) stime = std::stoll(f);
  }
  return utime + stime;
}

// The child: registers, reports its latency (ns, or -status) on `report`,
// then waits for `stop` to close.
[[noreturn]] void Tenant(const std::string& socket, const std::string& shm_dir,
                         const std::string& uuid, int group, int report, int stop) {
  // As a limited process would: attached to its group's segment, the GPU
  // compute-limited, so that the daemon controls the group.
  std::unique_ptr<gpuslice::GroupSegment> segment;
  if (!shm_dir.empty()) {
    auto opened = gpuslice::GroupSegment::Open(shm_dir, "bench-" + std::to_string(group), true);
    if (!opened.ok()) _exit(3);
    segment = std::move(opened).value();
    auto dev = segment->AttachDevice(uuid);
    if (!dev.ok() || !segment->Join(getpid(), 0, "bench").ok()) _exit(3);
    segment->LowerComputeLimit(*dev, 50);
  }
  const nlohmann::json body = {{"group", "bench-" + std::to_string(group)},
                               {"pid", getpid()},
                               {"devices", nlohmann::json::array()},
                               {"tier", "shared"}};
  const auto t0 = Clock::now();
  auto r =
      UnixHttpClient(socket, std::chrono::seconds(30)).Request("POST", "/v1/tenants", body.dump());
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  const int64_t value = r.ok() && r->status == 201 ? ns : -(r.ok() ? r->status : 1);
  if (write(report, &value, sizeof value) != sizeof value) _exit(1);
  char c;
  while (read(stop, &c, 1) != 0) {
  }
  _exit(0);
}

// The first GPU's UUID, from the daemon.
std::string FirstGpu(const std::string& socket) {
  auto r = UnixHttpClient(socket, std::chrono::seconds(30)).Request("GET", "/v1/gpus");
  if (!r.ok() || r->status != 200) throw std::runtime_error("GET /v1/gpus failed");
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (!j.contains("gpus") || j["gpus"].empty()) throw std::runtime_error("the daemon has no GPU");
  return j["gpus"][0].value("uuid", "");
}

// Groups whose controller role the daemon holds, from its metrics.
int ControlledGroups(const std::string& socket) {
  auto r = UnixHttpClient(socket, std::chrono::seconds(30)).Request("GET", "/metrics");
  if (!r.ok() || r->status != 200) return -1;
  int n = 0;
  const std::string needle = "gpuslice_group_controlled_by_daemon{";
  for (size_t at = r->body.find(needle); at != std::string::npos;
       at = r->body.find(needle, at + 1)) {
    const size_t eol = r->body.find('\n', at);
    if (eol != std::string::npos && r->body.compare(eol - 2, 2, " 1") == 0) ++n;
  }
  return n;
}

size_t TenantCount(const std::string& socket) {
  auto r = UnixHttpClient(socket, std::chrono::seconds(30)).Request("GET", "/v1/tenants");
  if (!r.ok() || r->status != 200) return SIZE_MAX;
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  return j.is_object() && j.contains("tenants") ? j["tenants"].size() : SIZE_MAX;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"gpuslice-bench-registry: the daemon's tenant registry under load"};
  std::string socket;
  pid_t daemon_pid = 0;
  int groups = 200, processes = 1000, gets = 200, tick_ms = 50;
  double idle_s = 5;
  app.add_option("--socket", socket, "The daemon's socket")->required();
  app.add_option("--daemon-pid", daemon_pid, "The daemon's pid (for its CPU time)")->required();
  app.add_option("--groups", groups, "Groups the tenants spread over")
      ->check(CLI::Range(1, 100000));
  app.add_option("--processes", processes, "Tenant processes")->check(CLI::Range(1, 100000));
  app.add_option("--gets", gets, "GET /v1/tenants requests to time")->check(CLI::Range(1, 100000));
  app.add_option("--idle-s", idle_s, "Seconds to measure the daemon's CPU with every tenant held");
  app.add_option("--tick-ms", tick_ms, "The daemon's sampling period");
  std::string shm_dir;
  app.add_option("--shm-dir", shm_dir,
                 "The daemon's segment directory: tenants attach to their groups' segments "
                 "there (compute-limited), so the daemon controls every group");
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  const std::string uuid = shm_dir.empty() ? "" : FirstGpu(socket);

  int report[2], stop[2];
  if (pipe(report) != 0 || pipe(stop) != 0) throw std::runtime_error("pipe failed");
  std::vector<pid_t> children;
  std::vector<int64_t> reg_ns;
  int refused = 0;
  const auto reg_start = Clock::now();
  // At most 32 registrations in flight, as when many pods start at once.
  for (int i = 0; i < processes; ++i) {
    if (i >= 32) {
      int64_t v;
      if (read(report[0], &v, sizeof v) != sizeof v) throw std::runtime_error("child report lost");
      v >= 0 ? reg_ns.push_back(v) : void(++refused);
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(report[0]);
      close(stop[1]);
      Tenant(socket, shm_dir, uuid, i % groups, report[1], stop[0]);
    }
    children.push_back(pid);
  }
  while (static_cast<int>(reg_ns.size()) + refused < processes) {
    int64_t v;
    if (read(report[0], &v, sizeof v) != sizeof v) throw std::runtime_error("child report lost");
    v >= 0 ? reg_ns.push_back(v) : void(++refused);
  }
  const double reg_s = std::chrono::duration<double>(Clock::now() - reg_start).count();

  std::vector<int64_t> get_ns;
  size_t listed = 0;
  for (int i = 0; i < gets; ++i) {
    const auto t0 = Clock::now();
    listed = TenantCount(socket);
    get_ns.push_back(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  }

  // Every group controlled (the daemon adopts new segments once a second).
  int controlled = 0;
  if (!shm_dir.empty()) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while ((controlled = ControlledGroups(socket)) < groups && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  const int64_t cpu0 = CpuTicks(daemon_pid);
  const auto idle_start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));  // the measured window
  const int64_t cpu1 = CpuTicks(daemon_pid);
  const double window_s = std::chrono::duration<double>(Clock::now() - idle_start).count();
  const double cpu_s = static_cast<double>(cpu1 - cpu0) / static_cast<double>(sysconf(_SC_CLK_TCK));

  close(stop[1]);  // every tenant exits
  const auto exit_start = Clock::now();
  for (pid_t pid : children) waitpid(pid, nullptr, 0);
  size_t left = SIZE_MAX;
  while (Clock::now() - exit_start < std::chrono::seconds(60)) {
    left = TenantCount(socket);
    if (left == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double reclaim_s = std::chrono::duration<double>(Clock::now() - exit_start).count();

  auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e6; };
  printf("%d processes in %d groups, %ld cores\n", processes, groups,
         sysconf(_SC_NPROCESSORS_ONLN));
  printf("%-34s %12s %12s %12s\n", "measure", "p50", "p99", "max");
  printf("%-34s %10.2f ms %10.2f ms %10.2f ms\n", "POST /v1/tenants (registration)",
         ms(Percentile(reg_ns, 0.5)), ms(Percentile(reg_ns, 0.99)), ms(Percentile(reg_ns, 1)));
  printf("%-34s %10.2f ms %10.2f ms %10.2f ms\n",
         ("GET /v1/tenants (" + std::to_string(listed) + " listed)").c_str(),
         ms(Percentile(get_ns, 0.5)), ms(Percentile(get_ns, 0.99)), ms(Percentile(get_ns, 1)));
  printf("registrations: %zu ok, %d refused, %.0f/s\n", reg_ns.size(), refused,
         static_cast<double>(processes) / reg_s);
  printf(
      "daemon CPU with every tenant held: %.2f%% of a core over %.1f s = %.1f us per %d ms "
      "sampling tick\n",
      100 * cpu_s / window_s, window_s, cpu_s / (window_s * 1000 / tick_ms) * 1e6, tick_ms);
  if (!shm_dir.empty()) {
    // The control loop ticks every 50 ms while a group is compute-limited;
    // the CPU above (sampling included) per such tick.
    printf(
        "groups controlled by the daemon: %d of %d; %.1f us of daemon CPU per 50 ms "
        "controller tick (all groups, sampling included)\n",
        controlled, groups, cpu_s / (window_s * 20) * 1e6);
  }
  printf("all %d exits noticed (GET /v1/tenants empty) after %.3f s%s\n", processes, reclaim_s,
         left == 0 ? "" : " (NOT all: timed out)");
  const bool all_controlled = shm_dir.empty() || controlled == groups;
  return refused == 0 && left == 0 && listed == static_cast<size_t>(processes) && all_controlled
             ? 0
             : 1;
} catch (const std::exception& e) {
  fprintf(stderr, "gpuslice-bench-registry: %s\n", e.what());
  return 1;
}
