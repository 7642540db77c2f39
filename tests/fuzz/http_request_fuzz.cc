// Fuzzes the daemon's HTTP request path the way HttpServer handles a request
// (src/daemon/http/server.cc Handle), without sockets: Beast's request parser
// with the server's limits, ParseTarget, the bearer token check, Authorize,
// the route table and every route's handler, on a fake GPU backend, a fake
// /proc and a tenant registry rebuilt for each input (so a crash reproduces
// from its input alone).
//
// Input: the first byte picks the caller (root on the Unix socket, uid 1000
// as pid 100 or 101, a TCP client); the rest is the raw request bytes. Properties
// beyond "no crash": every answer has an HTTP status, JSON answers parse,
// and no input makes a handler answer 500.
#include <sys/stat.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "daemon/api/gpu_routes.h"
#include "daemon/api/tenant_routes.h"
#include "daemon/gpu/fake_backend.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/http/http_util.h"
#include "fuzz_input.h"

namespace gpuslice::daemon {
namespace {

namespace http = boost::beast::http;

// A fake /proc with pids 100 and 101 (uid 1000, in a pod; 101's environment
// is not UTF-8) and 300 (uid 65534), made once per process; the registry only
// reads it.
const std::string& ProcRoot() {
  static const fuzz::TempDir root("gpuslice-fuzz-proc");
  static const bool filled = [] {
    const std::string& dir = root.path();
    constexpr const char* kPod = "0::/kubepods/podaaaaaaaa-1111-2222-3333-444444444444/c\n";
    for (auto [pid, uid, cgroup, environ] :
         {std::tuple{100, 1000, kPod, "POD_NAME=web-0"},
          std::tuple{101, 1000, kPod, "POD_NAME=\xff\xfe"},
          std::tuple{300, 65534, "0::/user.slice/s.scope\n", ""}}) {
      const std::string p = dir + "/" + std::to_string(pid);
      std::filesystem::create_directories(p);
      const std::string u = std::to_string(uid);
      std::ofstream(p + "/status") << "Name:\tw\nUid:\t" << u << "\t" << u << "\t" << u << "\t" << u
                                   << "\nNSpid:\t" << pid << "\n";
      std::string stat = std::to_string(pid) + " (w) S";
      for (int f = 4; f <= 21; ++f) stat += " 0";
      std::ofstream(p + "/stat") << stat << " 7 0 0\n";
      std::ofstream(p + "/cgroup") << cgroup;
      std::ofstream(p + "/environ") << environ;
    }
    return true;
  }();
  (void)filled;
  return root.path();
}

class AlwaysAlive final : public LivenessWatcher {
 public:
  Status Watch(pid_t /*pid*/, uint64_t /*start_time*/) override { return Status::Ok(); }
  void Unwatch(pid_t /*pid*/) override {}
};

Caller CallerFor(uint8_t b) {
  switch (b % 4) {
    case 0:
      return Caller{0, 0, 1, false, false};
    case 1:
      return Caller{1000, 1000, 100, false, false};
    case 2:
      return Caller{1000, 1000, 101, false, false};
    default:
      return Caller{std::nullopt, std::nullopt, std::nullopt, true, false};
  }
}

void CheckResponse(const ApiResponse& r, std::string_view request) {
  if (r.status < 100 || r.status > 599) fuzz::Fail("HTTP status", request);
  if (r.status == 500) fuzz::Fail("500 from outside input", r.body);
  if (r.content_type == "application/json" && !r.body.empty() && !nlohmann::json::accept(r.body)) {
    fuzz::Fail("JSON answer", r.body);
  }
}

void Handle(const http::request<http::string_body>& req, Caller caller, std::string_view raw) {
  auto target = ParseTarget(std::string_view(req.target().data(), req.target().size()));
  if (!target.ok()) return CheckResponse(ApiResponse::FromStatus(target.status()), raw);
  const std::string method(req.method_string());
  if (method == "GET" && target->path == "/v1/events") return;  // a stream, not a reply

  FakeBackend backend(2);
  SimulatedClock clock;
  GpuManager manager(backend, clock);
  GpuMonitor monitor(backend, std::chrono::milliseconds(1000), &clock);
  monitor.Sample();
  GpuUsageCache usage;
  AlwaysAlive watcher;
  TenantRegistry registry(TenantRegistry::Options{ProcRoot()}, clock, watcher, nullptr,
                          [](std::string_view, const nlohmann::json&) {});
  ApiRouter router;
  AddGpuRoutes(router, manager, monitor, GpuRoutesOptions{});
  TenantRoutesOptions options;
  options.is_admin = [](const Caller& c) { return c.via_tcp ? c.token_ok : c.uid && *c.uid == 0; };
  options.proc_root = ProcRoot();
  AddTenantRoutes(router, registry, monitor, usage, options);

  auto match = router.Find(method, target->path);
  if (!match.ok()) return CheckResponse(ApiResponse::FromStatus(match.status()), raw);
  if (caller.via_tcp) {
    static const std::set<std::string> kTokens = {"s3cret"};
    auto auth = req.find(http::field::authorization);
    caller.token_ok =
        auth != req.end() &&
        BearerTokenValid(std::string_view(auth->value().data(), auth->value().size()), kTokens);
  }
  AuthPolicy policy{1234, [](uid_t uid, gid_t, gid_t) { return uid == 1000; }};
  if (Status s = Authorize(caller, match->access, policy); !s.ok()) {
    return CheckResponse(ApiResponse::FromStatus(s), raw);
  }
  ApiRequest api_req{method, target->path, target->query, match->params, req.body(), caller};
  CheckResponse((*match->handler)(api_req), raw);
}

}  // namespace
}  // namespace gpuslice::daemon

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuslice::daemon;
  if (size == 0) return 0;
  const Caller caller = CallerFor(data[0]);
  std::string_view raw(reinterpret_cast<const char*>(data) + 1, size - 1);

  // One request, as the server reads it (its header and body limits).
  http::request_parser<http::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(1 << 20);
  parser.eager(true);
  boost::beast::error_code ec;
  size_t used = 0;
  while (used < raw.size() && !parser.is_done()) {
    const size_t n = parser.put(boost::asio::buffer(raw.data() + used, raw.size() - used), ec);
    if (ec || n == 0) break;
    used += n;
  }
  if (!ec && !parser.is_done() && parser.is_header_done()) parser.put_eof(ec);
  if (ec || !parser.is_done()) return 0;  // the server answers 400/413/431 or waits
  Handle(parser.get(), caller, raw);
  return 0;
}
