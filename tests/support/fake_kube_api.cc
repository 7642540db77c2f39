#include "tests/support/fake_kube_api.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace gpuslice::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

namespace {

// A parsed API path: prefix ("/api/v1", "/apis/g/v"), namespace, resource, name.
struct ApiPath {
  std::string prefix;
  std::string ns;
  std::string resource;
  std::string name;
  std::string CollectionKey() const { return prefix + "/" + resource; }
  std::string ObjectKey() const { return ns + "/" + name; }
};

std::optional<ApiPath> ParsePath(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '/');) {
    if (!p.empty()) parts.push_back(p);
  }
  ApiPath a;
  size_t i = 0;
  if (parts.size() >= 2 && parts[0] == "api") {
    a.prefix = "/api/" + parts[1];
    i = 2;
  } else if (parts.size() >= 3 && parts[0] == "apis") {
    a.prefix = "/apis/" + parts[1] + "/" + parts[2];
    i = 3;
  } else {
    return std::nullopt;
  }
  if (parts.size() >= i + 3 && parts[i] == "namespaces") {
    a.ns = parts[i + 1];
    i += 2;
  }
  if (i >= parts.size()) return std::nullopt;
  a.resource = parts[i++];
  if (i < parts.size()) a.name = parts[i++];
  if (i != parts.size()) return std::nullopt;
  return a;
}

std::string UrlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else if (s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

const json* Field(const json& obj, const std::string& dotted) {
  const json* cur = &obj;
  std::stringstream ss(dotted);
  for (std::string part; std::getline(ss, part, '.');) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(part);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, sep);) {
    if (!p.empty()) out.push_back(p);
  }
  return out;
}

// fieldSelector / labelSelector: comma-separated k=v, k==v or k!=v.
bool Matches(const json& obj, const std::map<std::string, std::string>& query) {
  if (auto f = query.find("fieldSelector"); f != query.end()) {
    for (const std::string& term : Split(f->second, ',')) {
      bool neg = term.find("!=") != std::string::npos;
      size_t eq = term.find(neg ? "!=" : "=");
      std::string key = term.substr(0, eq);
      std::string value = term.substr(eq + (neg ? 2 : (term.compare(eq, 2, "==") == 0 ? 2 : 1)));
      const json* v = Field(obj, key);
      std::string actual = v != nullptr && v->is_string() ? v->get<std::string>() : "";
      if ((actual == value) == neg) return false;
    }
  }
  if (auto l = query.find("labelSelector"); l != query.end()) {
    const json* labels = Field(obj, "metadata.labels");
    for (const std::string& term : Split(l->second, ',')) {
      bool neg = term.find("!=") != std::string::npos;
      size_t eq = term.find(neg ? "!=" : "=");
      std::string key = term.substr(0, eq);
      std::string actual;
      if (eq == std::string::npos) {  // existence
        if (labels == nullptr || !labels->contains(term)) return false;
        continue;
      }
      std::string value = term.substr(eq + (neg ? 2 : (term.compare(eq, 2, "==") == 0 ? 2 : 1)));
      if (labels != nullptr && labels->contains(key) && (*labels)[key].is_string()) {
        actual = (*labels)[key].get<std::string>();
      }
      if ((actual == value) == neg) return false;
    }
  }
  return true;
}

json StatusObject(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

bool Truthy(const std::map<std::string, std::string>& q, const std::string& key) {
  auto it = q.find(key);
  return it != q.end() && (it->second == "1" || it->second == "true");
}

}  // namespace

struct FakeKubeApi::Impl {
  using Stream = asio::ssl::stream<tcp::socket>;

  struct Event {
    uint64_t rv;
    std::string collection;  // CollectionKey
    std::string type;
    json object;
  };

  asio::io_context io;
  asio::ssl::context ssl{asio::ssl::context::tls_server};
  tcp::acceptor acceptor{io};
  std::thread accept_thread;
  uint16_t port = 0;

  mutable std::mutex mu;
  mutable std::condition_variable changed;
  bool stopping = false;
  uint64_t rv = 100;
  uint64_t compacted_rv = 0;  // watches from below this get 410
  uint64_t uid_counter = 0;
  std::map<std::string, std::map<std::string, json>> objects;  // collection -> ns/name -> object
  std::vector<Event> history;
  std::string accepted_token;
  bool next_watch_gone = false;
  uint64_t gone_generation = 0;
  uint64_t drop_generation = 0;
  uint64_t bookmark_generation = 0;
  int fail_count = 0;
  int fail_code = 500;
  std::chrono::milliseconds delay{0};
  std::vector<LoggedRequest> log;
  int watches = 0;
  std::vector<std::thread> connections;
  std::set<int> open_fds;

  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
      for (int fd : open_fds) ::shutdown(fd, SHUT_RDWR);
    }
    changed.notify_all();
    beast::error_code ec;
    acceptor.close(ec);  // NOLINT(bugprone-unused-return-value)
    if (accept_thread.joinable()) accept_thread.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu);
      threads.swap(connections);
    }
    for (std::thread& t : threads) t.join();
  }

  void AcceptLoop() {
    for (;;) {
      beast::error_code ec;
      tcp::socket socket(io);
      acceptor.accept(socket, ec);  // NOLINT(bugprone-unused-return-value)
      std::lock_guard lock(mu);
      if (stopping) return;
      if (ec) continue;
      open_fds.insert(socket.native_handle());
      connections.emplace_back([this, s = std::move(socket)]() mutable { Serve(std::move(s)); });
    }
  }

  void Serve(tcp::socket socket) {
    const int fd = socket.native_handle();
    Stream stream(std::move(socket), ssl);
    beast::error_code ec;
    stream.handshake(asio::ssl::stream_base::server, ec);  // NOLINT(bugprone-unused-return-value)
    beast::flat_buffer buffer;
    while (!ec) {
      http::request<http::string_body> req;
      http::read(stream, buffer, req, ec);
      if (ec) break;
      if (!Handle(stream, req)) break;
      if (!req.keep_alive()) break;
    }
    std::lock_guard lock(mu);
    open_fds.erase(fd);
    beast::error_code ignored;
    stream.next_layer().close(ignored);  // NOLINT(bugprone-unused-return-value)
  }

  // Writes one response; false when the connection is done.
  static bool Reply(Stream& stream, int code, const json& body) {
    http::response<http::string_body> res{static_cast<http::status>(code), 11};
    res.set(http::field::content_type, "application/json");
    res.body() = body.dump();
    res.prepare_payload();
    beast::error_code ec;
    http::write(stream, res, ec);
    return !ec;
  }

  bool Handle(Stream& stream, const http::request<http::string_body>& req) {
    std::string target(req.target());
    LoggedRequest entry;
    entry.method = std::string(req.method_string());
    size_t q = target.find('?');
    entry.path = target.substr(0, q);
    if (q != std::string::npos) {
      for (const std::string& kv : Split(target.substr(q + 1), '&')) {
        size_t eq = kv.find('=');
        entry.query[UrlDecode(kv.substr(0, eq))] =
            eq == std::string::npos ? "" : UrlDecode(kv.substr(eq + 1));
      }
    }
    std::string auth(req[http::field::authorization]);
    if (auth.starts_with("Bearer ")) entry.token = auth.substr(7);

    std::chrono::milliseconds wait{0};
    int code = 0;
    json body;
    {
      std::lock_guard lock(mu);
      wait = delay;
      if (!accepted_token.empty() && entry.token != accepted_token) {
        code = 401;
        body = StatusObject(401, "Unauthorized", "Unauthorized");
      } else if (fail_count > 0) {
        --fail_count;
        code = fail_code;
        body = StatusObject(fail_code, "InternalError", "injected failure");
      }
    }
    if (wait.count() > 0) {
      std::unique_lock lock(mu);
      changed.wait_for(lock, wait, [this] { return stopping; });
    }
    auto path = ParsePath(entry.path);
    if (code == 0 && !path) {
      code = 404;
      body = StatusObject(404, "NotFound", "no such path " + entry.path);
    }
    if (code == 0 && req.method() == http::verb::get && path->name.empty() &&
        Truthy(entry.query, "watch")) {
      return Watch(stream, *path, entry);
    }
    if (code == 0) std::tie(code, body) = Serve(req, *path, entry);
    {
      std::lock_guard lock(mu);
      entry.code = code;
      log.push_back(entry);
    }
    changed.notify_all();
    return Reply(stream, code, body);
  }

  std::string Kind(const ApiPath& p) const {
    // "pods" -> "Pod"; good enough for the resources the tests use.
    static const std::map<std::string, std::string> kKinds = {{"pods", "Pod"},
                                                              {"nodes", "Node"},
                                                              {"events", "Event"},
                                                              {"resourceslices", "ResourceSlice"},
                                                              {"resourceclaims", "ResourceClaim"},
                                                              {"deviceclasses", "DeviceClass"}};
    auto it = kKinds.find(p.resource);
    return it == kKinds.end() ? p.resource : it->second;
  }

  // REQUIRES: mu held. Stores `obj` with a new resourceVersion and records the event.
  json& PutLocked(const std::string& collection, const std::string& key, json obj,
                  const std::string& type) {
    ++rv;
    obj["metadata"]["resourceVersion"] = std::to_string(rv);
    json& stored = objects[collection][key] = std::move(obj);
    history.push_back({rv, collection, type, stored});
    return stored;
  }

  std::pair<int, json> Serve(const http::request<http::string_body>& req, const ApiPath& p,
                             const LoggedRequest& entry) {
    std::lock_guard lock(mu);
    auto& coll = objects[p.CollectionKey()];
    json input;
    if (!req.body().empty()) {
      input = json::parse(req.body(), nullptr, false);
      if (input.is_discarded()) return {400, StatusObject(400, "BadRequest", "body is not JSON")};
    }
    auto not_found = [&] {
      return std::pair{404,
                       StatusObject(404, "NotFound", p.resource + " \"" + p.name + "\" not found")};
    };
    switch (req.method()) {
      case http::verb::get: {
        if (!p.name.empty()) {
          auto it = coll.find(p.ObjectKey());
          if (it == coll.end()) return not_found();
          return {200, it->second};
        }
        json items = json::array();
        for (const auto& [key, obj] : coll) {
          if (!p.ns.empty() && !key.starts_with(p.ns + "/")) continue;
          if (Matches(obj, entry.query)) items.push_back(obj);
        }
        return {200,
                {{"kind", Kind(p) + "List"},
                 {"apiVersion", "v1"},
                 {"metadata", {{"resourceVersion", std::to_string(rv)}}},
                 {"items", items}}};
      }
      case http::verb::post: {
        if (!input.is_object()) return {400, StatusObject(400, "BadRequest", "not an object")};
        std::string name = input["metadata"].value("name", "");
        if (name.empty()) {
          name = input["metadata"].value("generateName", "obj-") + std::to_string(++uid_counter);
          input["metadata"]["name"] = name;
        }
        if (!p.ns.empty()) input["metadata"]["namespace"] = p.ns;
        std::string key = p.ns + "/" + name;
        if (coll.contains(key)) {
          return {409, StatusObject(409, "AlreadyExists",
                                    p.resource + " \"" + name + "\" already exists")};
        }
        FillNewLocked(input);
        return {201, PutLocked(p.CollectionKey(), key, std::move(input), "ADDED")};
      }
      case http::verb::put: {
        auto it = coll.find(p.ObjectKey());
        if (it == coll.end()) return not_found();
        std::string want = input["metadata"].value("resourceVersion", "");
        if (!want.empty() && want != it->second["metadata"].value("resourceVersion", "")) {
          return {409, StatusObject(409, "Conflict",
                                    "the object has been modified; please apply your changes to "
                                    "the latest version and try again")};
        }
        input["metadata"]["uid"] = it->second["metadata"]["uid"];
        input["metadata"]["creationTimestamp"] = it->second["metadata"]["creationTimestamp"];
        return {200, PutLocked(p.CollectionKey(), p.ObjectKey(), std::move(input), "MODIFIED")};
      }
      case http::verb::patch: {
        auto it = coll.find(p.ObjectKey());
        if (it == coll.end()) return not_found();
        json patched = it->second;
        patched.merge_patch(input);
        return {200, PutLocked(p.CollectionKey(), p.ObjectKey(), std::move(patched), "MODIFIED")};
      }
      case http::verb::delete_: {
        auto it = coll.find(p.ObjectKey());
        if (it == coll.end()) return not_found();
        json obj = it->second;
        coll.erase(it);
        ++rv;
        obj["metadata"]["resourceVersion"] = std::to_string(rv);
        history.push_back({rv, p.CollectionKey(), "DELETED", obj});
        return {200, obj};
      }
      default:
        return {405, StatusObject(405, "MethodNotAllowed", "method not allowed")};
    }
  }

  void FillNewLocked(json& obj) {
    json& m = obj["metadata"];
    if (!m.contains("uid")) {
      char uid[40];
      snprintf(uid, sizeof uid, "00000000-0000-4000-8000-%012llu",
               static_cast<unsigned long long>(++uid_counter));  // NOLINT(google-runtime-int)
      m["uid"] = uid;
    }
    m["creationTimestamp"] = "2026-01-01T00:00:00Z";
  }

  static bool WriteChunk(Stream& stream, const std::string& data) {
    std::ostringstream chunk;
    chunk << std::hex << data.size() << "\r\n" << data << "\r\n";
    beast::error_code ec;
    asio::write(stream, asio::buffer(chunk.str()), ec);
    return !ec;
  }

  static std::string EventLine(const std::string& type, const json& object) {
    return json{{"type", type}, {"object", object}}.dump() + "\n";
  }

  // Serves a watch until it ends; false: the connection is done.
  bool Watch(Stream& stream, const ApiPath& p, LoggedRequest entry) {
    const bool bookmarks = Truthy(entry.query, "allowWatchBookmarks");
    uint64_t from = 0;
    if (auto it = entry.query.find("resourceVersion");
        it != entry.query.end() && !it->second.empty()) {
      from = std::stoull(it->second);
    }
    std::chrono::seconds timeout(3600);
    if (auto it = entry.query.find("timeoutSeconds"); it != entry.query.end()) {
      timeout = std::chrono::seconds(std::stoll(it->second));
    }
    const std::string collection = p.CollectionKey();
    std::unique_lock lock(mu);
    if (next_watch_gone) {
      next_watch_gone = false;
      entry.code = 410;
      log.push_back(entry);
      lock.unlock();
      changed.notify_all();
      return Reply(stream, 410, StatusObject(410, "Expired", "too old resource version"));
    }
    entry.code = 200;
    log.push_back(entry);
    ++watches;
    changed.notify_all();
    const uint64_t gone_at = gone_generation;
    const uint64_t drop_at = drop_generation;
    uint64_t bookmark_at = bookmark_generation;
    lock.unlock();
    std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    beast::error_code ec;
    asio::write(stream, asio::buffer(head), ec);
    lock.lock();
    bool alive = !ec;
    if (alive && from != 0 && from < compacted_rv) {
      std::string line =
          EventLine("ERROR", StatusObject(410, "Expired",
                                          "too old resource version: " + std::to_string(from) +
                                              " (" + std::to_string(compacted_rv) + ")"));
      lock.unlock();
      alive = WriteChunk(stream, line);
      lock.lock();
    } else {
      uint64_t sent = from;
      if (from == 0) sent = rv;  // no resourceVersion: only changes from now on
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (alive && !stopping) {
        if (drop_generation != drop_at) {
          --watches;
          ::shutdown(stream.next_layer().native_handle(), SHUT_RDWR);
          changed.notify_all();
          return false;
        }
        if (gone_generation != gone_at) {
          std::string line = EventLine("ERROR", StatusObject(410, "Expired", "watch expired"));
          lock.unlock();
          alive = WriteChunk(stream, line);
          lock.lock();
          break;
        }
        std::string out;
        for (const Event& e : history) {
          if (e.rv <= sent || e.collection != collection) continue;
          std::string key_ns = e.object["metadata"].value("namespace", "");
          if (!p.ns.empty() && key_ns != p.ns) continue;
          if (Matches(e.object, entry.query)) out += EventLine(e.type, e.object);
        }
        if (!history.empty()) sent = std::max(sent, history.back().rv);
        if (bookmark_generation != bookmark_at) {
          bookmark_at = bookmark_generation;
          if (bookmarks) {
            out += EventLine("BOOKMARK", {{"kind", Kind(p)},
                                          {"apiVersion", "v1"},
                                          {"metadata", {{"resourceVersion", std::to_string(rv)}}}});
          }
        }
        if (!out.empty()) {
          lock.unlock();
          alive = WriteChunk(stream, out);
          lock.lock();
          continue;
        }
        if (std::chrono::steady_clock::now() >= deadline) break;
        // A watch client sends nothing: readable means it closed the connection.
        pollfd pfd{stream.next_layer().native_handle(), POLLIN | POLLRDHUP, 0};
        if (::poll(&pfd, 1, 0) > 0) {
          alive = false;
          break;
        }
        changed.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                        std::chrono::milliseconds(20)));
      }
    }
    --watches;
    changed.notify_all();
    lock.unlock();
    if (!alive) return false;
    beast::error_code ignored;
    asio::write(stream, asio::buffer(std::string("0\r\n\r\n")), ignored);
    return false;  // a watch's connection is not reused
  }
};

StatusOr<std::unique_ptr<FakeKubeApi>> FakeKubeApi::Start(const std::string& dir) {
  const std::string cmd =
      "cd '" + dir +
      "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-keyout ca.key -out ca.crt -days 2 -subj /CN=fake-kube-ca "
      "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign "
      ">/dev/null 2>&1 && "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key "
      "-out server.csr -subj /CN=127.0.0.1 >/dev/null 2>&1 && "
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext.cnf && "
      "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt "
      "-days 2 -extfile ext.cnf >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {  // NOLINT(concurrency-mt-unsafe)
    return Internal("openssl could not make the test certificates in " + dir);
  }
  auto impl = std::make_unique<Impl>();
  beast::error_code ec;
  impl->ssl.use_certificate_chain_file(dir + "/server.crt", ec);
  if (!ec) impl->ssl.use_private_key_file(dir + "/server.key", asio::ssl::context::pem, ec);
  if (ec) return Internal("loading the test certificate: " + ec.message());
  tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(64, ec);
  if (ec) return Internal("listening on 127.0.0.1: " + ec.message());
  impl->port = impl->acceptor.local_endpoint().port();
  Impl* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->AcceptLoop(); });
  std::unique_ptr<FakeKubeApi> api(new FakeKubeApi(std::move(impl)));
  api->ca_file_ = dir + "/ca.crt";
  return api;
}

FakeKubeApi::FakeKubeApi(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FakeKubeApi::~FakeKubeApi() {
  // The acceptor blocks in accept(): wake it with a connection.
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  try {
    beast::error_code ec;
    asio::io_context io;
    tcp::socket s(io);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), impl_->port),
              ec);  // NOLINT(bugprone-unused-return-value)
  } catch (...) {   // NOLINT(bugprone-empty-catch): the acceptor is closed below anyway
  }
  impl_.reset();
}

std::string FakeKubeApi::url() const { return "https://127.0.0.1:" + std::to_string(impl_->port); }

json FakeKubeApi::Create(const std::string& collection, json object) {
  auto p = ParsePath(collection + "/x");
  std::lock_guard lock(impl_->mu);
  std::string name = object["metadata"].value("name", "");
  if (!p->ns.empty()) object["metadata"]["namespace"] = p->ns;
  impl_->FillNewLocked(object);
  json out = impl_->PutLocked(p->CollectionKey(), p->ns + "/" + name, std::move(object), "ADDED");
  impl_->changed.notify_all();
  return out;
}

bool FakeKubeApi::Modify(const std::string& path, const std::function<void(json&)>& change) {
  auto p = ParsePath(path);
  std::lock_guard lock(impl_->mu);
  auto& coll = impl_->objects[p->CollectionKey()];
  auto it = coll.find(p->ObjectKey());
  if (it == coll.end()) return false;
  json obj = it->second;
  change(obj);
  impl_->PutLocked(p->CollectionKey(), p->ObjectKey(), std::move(obj), "MODIFIED");
  impl_->changed.notify_all();
  return true;
}

bool FakeKubeApi::Remove(const std::string& path) {
  auto p = ParsePath(path);
  std::lock_guard lock(impl_->mu);
  auto& coll = impl_->objects[p->CollectionKey()];
  auto it = coll.find(p->ObjectKey());
  if (it == coll.end()) return false;
  json obj = it->second;
  coll.erase(it);
  obj["metadata"]["resourceVersion"] = std::to_string(++impl_->rv);
  impl_->history.push_back({impl_->rv, p->CollectionKey(), "DELETED", obj});
  impl_->changed.notify_all();
  return true;
}

std::optional<json> FakeKubeApi::Get(const std::string& path) const {
  auto p = ParsePath(path);
  std::lock_guard lock(impl_->mu);
  auto c = impl_->objects.find(p->CollectionKey());
  if (c == impl_->objects.end()) return std::nullopt;
  auto it = c->second.find(p->ObjectKey());
  if (it == c->second.end()) return std::nullopt;
  return it->second;
}

std::vector<json> FakeKubeApi::List(const std::string& collection) const {
  auto p = ParsePath(collection);
  std::lock_guard lock(impl_->mu);
  std::vector<json> out;
  auto c = impl_->objects.find(p->CollectionKey());
  if (c == impl_->objects.end()) return out;
  for (const auto& [key, obj] : c->second) {
    if (p->ns.empty() || key.starts_with(p->ns + "/")) out.push_back(obj);
  }
  return out;
}

uint64_t FakeKubeApi::resource_version() const {
  std::lock_guard lock(impl_->mu);
  return impl_->rv;
}

void FakeKubeApi::AcceptToken(std::string token) {
  std::lock_guard lock(impl_->mu);
  impl_->accepted_token = std::move(token);
}

void FakeKubeApi::FailNextWatchWithGone() {
  std::lock_guard lock(impl_->mu);
  impl_->next_watch_gone = true;
}

void FakeKubeApi::SendGoneToWatches() {
  std::lock_guard lock(impl_->mu);
  ++impl_->gone_generation;
  impl_->changed.notify_all();
}

void FakeKubeApi::Compact() {
  std::lock_guard lock(impl_->mu);
  impl_->compacted_rv = impl_->rv + 1;
  impl_->history.clear();
}

void FakeKubeApi::DropConnections() {
  std::lock_guard lock(impl_->mu);
  ++impl_->drop_generation;
  impl_->changed.notify_all();
}

void FakeKubeApi::FailNextRequests(int count, int code) {
  std::lock_guard lock(impl_->mu);
  impl_->fail_count = count;
  impl_->fail_code = code;
}

void FakeKubeApi::SetDelay(std::chrono::milliseconds delay) {
  std::lock_guard lock(impl_->mu);
  impl_->delay = delay;
}

void FakeKubeApi::SendBookmark() {
  std::lock_guard lock(impl_->mu);
  ++impl_->bookmark_generation;
  impl_->changed.notify_all();
}

std::vector<FakeKubeApi::LoggedRequest> FakeKubeApi::Requests() const {
  std::lock_guard lock(impl_->mu);
  return impl_->log;
}

int FakeKubeApi::open_watches() const {
  std::lock_guard lock(impl_->mu);
  return impl_->watches;
}

bool FakeKubeApi::WaitForRequests(
    const std::function<bool(const std::vector<LoggedRequest>&)>& pred,
    std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mu);
  return impl_->changed.wait_for(lock, timeout, [&] { return pred(impl_->log); });
}

bool FakeKubeApi::WaitForOpenWatches(int n, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mu);
  return impl_->changed.wait_for(lock, timeout, [&] { return impl_->watches == n; });
}

}  // namespace gpuslice::testing
