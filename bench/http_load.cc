// gpuslice-bench-http: load generator for gpusliced's HTTP API over its Unix
// socket. Holds --idle connections open (connected, silent) while --clients
// keep-alive clients send GET --path back to back for --duration seconds,
// then prints requests/s and latency percentiles. Raw sockets, one thread per
// client, blocking I/O: the client is simple so that the figure is the
// daemon's.
//
//   gpuslice-bench-http --socket /run/gpuslice/gpusliced.sock [--clients 16]
//       [--idle 500] [--duration 5] [--path /v1/gpus] [--json]
// bench/daemon_http starts a daemon on the simulated GPU and runs this.
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int Connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads one response (headers + Content-Length body) into `buf`; false on
// error or close. Leftover bytes stay in `buf` for the next response.
bool ReadResponse(int fd, std::string& buf, int* status) {
  for (;;) {
    const size_t end = buf.find("\r\n\r\n");
    if (end != std::string::npos) {
      size_t length = 0;
      const size_t cl = buf.find("Content-Length: ");
      if (cl != std::string::npos && cl < end)
        length = strtoull(buf.c_str() + cl + 16, nullptr, 10);
      if (buf.size() >= end + 4 + length) {
        *status = atoi(buf.c_str() + 9);
        buf.erase(0, end + 4 + length);
        return true;
      }
    }
    char chunk[65536];
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
  }
}

struct ClientResult {
  std::vector<int64_t> latencies_ns;
  int64_t errors = 0;
};

void RunClient(const std::string& socket_path, const std::string& request, Clock::time_point start,
               Clock::time_point end, ClientResult* out) {
  int fd = -1;
  std::string buf;
  while (Clock::now() < end) {
    if (fd < 0) {
      fd = Connect(socket_path);
      buf.clear();
      if (fd < 0) {
        ++out->errors;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
    }
    const auto t0 = Clock::now();
    int status = 0;
    if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size()) ||
        !ReadResponse(fd, buf, &status)) {
      ++out->errors;
      close(fd);
      fd = -1;
      continue;
    }
    const auto t1 = Clock::now();
    if (status != 200) ++out->errors;
    if (t0 >= start) out->latencies_ns.push_back((t1 - t0).count());
  }
  if (fd >= 0) close(fd);
}

double Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i =
      std::min(sorted.size() - 1, static_cast<size_t>(p * static_cast<double>(sorted.size())));
  return static_cast<double>(sorted[i]) / 1000.0;  // microseconds
}

}  // namespace

int Run(int argc, char** argv) {
  CLI::App app{"gpuslice-bench-http: HTTP load on gpusliced's Unix socket"};
  std::string socket_path;
  std::string path = "/v1/gpus";
  int clients = 16;
  int idle = 500;
  double duration = 5;
  double warmup = 0.5;
  bool json = false;
  app.add_option("--socket", socket_path, "gpusliced's socket")->required();
  app.add_option("--path", path, "Target of every request (default /v1/gpus)");
  app.add_option("--clients", clients, "Concurrent keep-alive clients (default 16)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--idle", idle, "Idle connections held open meanwhile (default 500)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--duration", duration, "Seconds measured (default 5)")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--warmup", warmup, "Seconds not measured first (default 0.5)")
      ->check(CLI::Range(0.0, 60.0));
  app.add_flag("--json", json, "One JSON line instead of the table");
  CLI11_PARSE(app, argc, argv);

  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
  std::vector<int> idle_fds;
  for (int i = 0; i < idle; ++i) {
    int fd = Connect(socket_path);
    if (fd < 0) {
      fprintf(stderr, "gpuslice-bench-http: idle connection %d: %s\n", i, strerror(errno));
      return 1;
    }
    idle_fds.push_back(fd);
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: gpusliced\r\n\r\n";
  const auto start = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(warmup));
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
  std::vector<ClientResult> results(static_cast<size_t>(clients));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(clients));
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back(RunClient, socket_path, request, start, end, &results[i]);
  }
  for (auto& t : threads) t.join();

  // Idle connections the daemon closed meanwhile (it should close none
  // before its idle timeout).
  int idle_closed = 0;
  for (int fd : idle_fds) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) ++idle_closed;
    close(fd);
  }
  std::vector<int64_t> all;
  int64_t errors = 0;
  for (const auto& c : results) {
    all.insert(all.end(), c.latencies_ns.begin(), c.latencies_ns.end());
    errors += c.errors;
  }
  std::sort(all.begin(), all.end());
  const double rps = static_cast<double>(all.size()) / duration;
  if (json) {
    printf(
        "{\"clients\":%d,\"idle\":%d,\"requests\":%zu,\"errors\":%lld,\"rps\":%.0f,"
        "\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,\"idle_closed\":%d}\n",
        clients, idle, all.size(), static_cast<long long>(errors), rps, Percentile(all, 0.5),
        Percentile(all, 0.9), Percentile(all, 0.99),
        all.empty() ? 0.0 : static_cast<double>(all.back()) / 1000.0, idle_closed);
  } else {
    printf("%-8s %-6s %-10s %-7s %-10s %-9s %-9s %-9s %-9s %s\n", "clients", "idle", "requests",
           "errors", "req/s", "p50 us", "p90 us", "p99 us", "max us", "idle closed");
    printf("%-8d %-6d %-10zu %-7lld %-10.0f %-9.1f %-9.1f %-9.1f %-9.1f %d\n", clients, idle,
           all.size(), static_cast<long long>(errors), rps, Percentile(all, 0.5),
           Percentile(all, 0.9), Percentile(all, 0.99),
           all.empty() ? 0.0 : static_cast<double>(all.back()) / 1000.0, idle_closed);
  }
  return errors == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    fprintf(stderr, "gpuslice-bench-http: %s\n", e.what());
    return 1;
  }
}
