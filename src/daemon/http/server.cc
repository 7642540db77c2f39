#include "daemon/http/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/log.h"

namespace gpuslice::daemon {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using UnixProtocol = asio::local::stream_protocol;
using TcpProtocol = asio::ip::tcp;

struct HttpServer::Impl {
  Impl(ServerOptions o, const ApiRouter& r, EventHub& h)
      : options(std::move(o)), router(r), hub(h) {}

  void AcceptUnix();
  void AcceptTcp();
  // Binds a new listening socket at options.socket_path (creating its
  // directory, replacing a stale file, refusing a live one) into `out`.
  Status BindUnix(std::optional<UnixProtocol::acceptor>& out);
  // Checks the socket file every socket_check_interval; rebinds a lost one.
  void WatchSocket();
  void CheckSocket();
  // Whether the file at the socket path is the one this server bound.
  bool SocketIsOurs() const;
  template <typename Protocol>
  void OnAccept(typename Protocol::socket socket, bool via_tcp);
  void RetryAccept(bool tcp);

  const ServerOptions options;
  const ApiRouter& router;
  EventHub& hub;
  std::atomic<size_t> connections{0};
  std::unique_ptr<asio::io_context> ioc;
  std::unique_ptr<asio::thread_pool> workers;
  std::optional<UnixProtocol::acceptor> unix_acceptor;
  std::optional<TcpProtocol::acceptor> tcp_acceptor;
  std::vector<std::thread> threads;
  bool running = false;
  // The socket file bound (device, inode), and the acceptor generation: a
  // rebind closes the old acceptor, whose accept loop then ends.
  mutable std::mutex unix_mu;
  dev_t socket_dev = 0;
  ino_t socket_ino = 0;
  uint64_t unix_generation = 0;
  std::unique_ptr<asio::steady_timer> socket_timer;
  std::atomic<uint64_t> socket_recreated{0};
  std::atomic<uint64_t> socket_failures{0};
  bool socket_failure_logged = false;  // on the timer's handler only
};

namespace {

constexpr std::string_view kBusyResponse =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: "
    "close\r\nContent-Length: 78\r\n\r\n"
    R"({"error":{"code":"UNAVAILABLE","message":"too many connections, retry later"}})";
static_assert(kBusyResponse.substr(kBusyResponse.find("\r\n\r\n") + 4).size() == 78);

// One connection: reads requests one after another (keep-alive), answers
// each, or turns into an event stream for GET /v1/events. Every handler runs
// on the connection's strand.
template <typename Protocol>
class Session : public std::enable_shared_from_this<Session<Protocol>> {
 public:
  using Stream = beast::basic_stream<Protocol>;

  Session(HttpServer::Impl& server, typename Protocol::socket&& socket, Caller caller)
      : server_(server),
        stream_(std::move(socket)),
        caller_(std::move(caller)),
        timer_(stream_.get_executor()) {}

  ~Session() {
    if (subscription_ != 0) server_.hub.Unsubscribe(subscription_);
    server_.connections.fetch_sub(1, std::memory_order_relaxed);
  }

  void Start() { WaitForRequest(); }

 private:
  // Waits, up to the idle timeout, for the first byte of the next request.
  void WaitForRequest() {
    if (buffer_.size() > 0) {
      ReadHeader();
      return;
    }
    timer_.expires_after(server_.options.idle_timeout);
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) self->Close();  // idle too long
    });
    stream_.socket().async_wait(Protocol::socket::wait_read,
                                [self = this->shared_from_this()](beast::error_code ec) {
                                  self->timer_.cancel();
                                  if (ec) return self->Close();
                                  self->ReadHeader();
                                });
  }

  void ReadHeader() {
    head_ = false;  // until this request says HEAD
    parser_.emplace();
    parser_->header_limit(16 * 1024);
    parser_->body_limit(server_.options.max_body_bytes);
    stream_.expires_after(server_.options.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->OnReadError(ec);
                              self->ReadBody();
                            });
  }

  void ReadBody() {
    stream_.expires_after(server_.options.body_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->OnReadError(ec);
                       self->Handle();
                     });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return Reply(
          413,
          "request body larger than " + std::to_string(server_.options.max_body_bytes) + " bytes",
          false);
    }
    if (ec == http::error::header_limit) return Reply(431, "request header too large", false);
    if (ec.category() == beast::error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return Reply(400, "malformed HTTP request: " + ec.message(), false);
    }
    Close();  // timeout, end of stream, reset
  }

  void Reply(int status, const std::string& message, bool keep_alive) {
    ApiResponse r = ApiResponse::FromStatus(Status(StatusCode::kInvalidArgument, message));
    r.status = status;
    Send(std::move(r), keep_alive);
  }

  void Handle() {
    const auto& req = parser_->get();
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    auto target = ParseTarget(std::string_view(req.target().data(), req.target().size()));
    if (!target.ok()) return Send(ApiResponse::FromStatus(target.status()), keep_alive_);
    // HEAD is answered as GET is, without the body (Send leaves it out and
    // keeps its Content-Length); the handler sees GET.
    head_ = req.method() == http::verb::head;
    const std::string method = head_ ? "GET" : std::string(req.method_string());
    if (method == "GET" && target->path == "/v1/events") {
      if (head_) return SendEventStreamHead();
      return StartEvents();
    }
    auto match = server_.router.Find(method, target->path);
    if (!match.ok()) {
      ApiResponse r = ApiResponse::FromStatus(match.status());
      if (match.status().code() == StatusCode::kFailedPrecondition) {
        r = ApiResponse::FromStatus(FailedPrecondition(
            "method not allowed: " + std::string(req.method_string()) + " " + target->path));
        r.status = 405;
      }
      return Send(std::move(r), keep_alive_);
    }
    if (method != "GET" && method != "HEAD") {
      auto origin = req.find(http::field::origin);
      auto host = req.find(http::field::host);
      if (origin != req.end()) {
        Status s = CheckSameOrigin(
            std::string_view(origin->value().data(), origin->value().size()),
            host == req.end() ? std::string_view()
                              : std::string_view(host->value().data(), host->value().size()));
        if (!s.ok()) {
          GS_LOG(kInfo, "gpusliced", "event=request_denied method=%s path=%s reason=\"%s\"",
                 method.c_str(), target->path.c_str(), s.message().c_str());
          return Send(ApiResponse::FromStatus(s), keep_alive_);
        }
      }
    }
    Caller caller = caller_;
    if (caller.via_tcp) {
      auto auth = req.find(http::field::authorization);
      caller.token_ok =
          auth != req.end() &&
          BearerTokenValid(std::string_view(auth->value().data(), auth->value().size()),
                           server_.options.tokens);
    }
    if (Status s = Authorize(caller, match->access, server_.options.auth); !s.ok()) {
      GS_LOG(kInfo, "gpusliced", "event=request_denied method=%s path=%s uid=%d reason=\"%s\"",
             method.c_str(), target->path.c_str(), caller.uid ? static_cast<int>(*caller.uid) : -1,
             s.message().c_str());
      return Send(ApiResponse::FromStatus(s), keep_alive_);
    }
    auto api_req = std::make_shared<ApiRequest>(
        ApiRequest{method, std::move(target->path), std::move(target->query),
                   std::move(match->params), parser_->release().body(), caller});
    const ApiRouter::Handler* handler = match->handler;
    if (match->dispatch == Dispatch::kInline) return Send((*handler)(*api_req), keep_alive_);
    asio::post(*server_.workers, [self = this->shared_from_this(), handler, api_req] {
      ApiResponse r = (*handler)(*api_req);
      GS_LOG(kDebug, "gpusliced", "event=request method=%s path=%s status=%d",
             api_req->method.c_str(), api_req->path.c_str(), r.status);
      asio::post(self->stream_.get_executor(), [self, r = std::move(r)]() mutable {
        self->Send(std::move(r), self->keep_alive_);
      });
    });
  }

  void Send(ApiResponse r, bool keep_alive) {
    if (head_) return SendHead(r, keep_alive);
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), version_ == 0 ? 11 : version_);
    res->set(http::field::server, "gpusliced");
    res->set(http::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) res->set(name, value);
    res->keep_alive(keep_alive);
    res->body() = std::move(r.body);
    res->prepare_payload();
    stream_.expires_after(server_.options.body_timeout);
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res](beast::error_code ec, size_t) {
                        if (ec || !res->keep_alive()) return self->Close();
                        self->WaitForRequest();
                      });
  }

  // The answer to a HEAD: GET's status and headers, Content-Length the size
  // of GET's body, no body.
  void SendHead(const ApiResponse& r, bool keep_alive) {
    auto res = std::make_shared<http::response<http::empty_body>>(
        static_cast<http::status>(r.status), version_ == 0 ? 11 : version_);
    res->set(http::field::server, "gpusliced");
    res->set(http::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) res->set(name, value);
    res->keep_alive(keep_alive);
    res->content_length(r.body.size());
    WriteResponse(res);
  }

  // HEAD /v1/events: the stream's headers, then the connection closes.
  void SendEventStreamHead() {
    auto res = std::make_shared<http::response<http::empty_body>>(http::status::ok,
                                                                  version_ == 0 ? 11 : version_);
    res->set(http::field::server, "gpusliced");
    res->set(http::field::content_type, "text/event-stream");
    res->set(http::field::cache_control, "no-cache");
    res->keep_alive(false);
    WriteResponse(res);
  }

  template <typename Response>
  void WriteResponse(std::shared_ptr<Response> res) {
    stream_.expires_after(server_.options.body_timeout);
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res](beast::error_code ec, size_t) {
                        if (ec || !res->keep_alive()) return self->Close();
                        self->WaitForRequest();
                      });
  }

  // ---- server-sent events ----

  void StartEvents() {
    stream_.expires_never();
    auto weak = std::weak_ptr<Session>(this->shared_from_this());
    auto executor = stream_.get_executor();
    subscription_ = server_.hub.Subscribe([weak, executor](std::shared_ptr<const std::string> e) {
      asio::post(executor, [weak, e = std::move(e)] {
        if (auto self = weak.lock()) self->QueueEvent(e);
      });
    });
    QueueEvent(std::make_shared<const std::string>(
        "HTTP/1.1 200 OK\r\nServer: gpusliced\r\nContent-Type: text/event-stream\r\n"
        "Cache-Control: no-cache\r\nConnection: close\r\n\r\n: connected\n\n"));
    ScheduleKeepAlive();
    // A read that completes only when the client goes away.
    stream_.socket().async_read_some(
        asio::buffer(sink_),
        [self = this->shared_from_this()](beast::error_code, size_t) { self->Close(); });
  }

  void ScheduleKeepAlive() {
    timer_.expires_after(server_.options.sse_keepalive);
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_) return;
      self->QueueEvent(std::make_shared<const std::string>(": keep-alive\n\n"));
      self->ScheduleKeepAlive();
    });
  }

  void QueueEvent(std::shared_ptr<const std::string> event) {
    if (closed_) return;
    if (queue_.size() >= server_.options.sse_max_queued) {
      GS_LOG(kWarn, "gpusliced", "event=sse_client_dropped reason=\"too slow\"");
      return Close();
    }
    queue_.push_back(std::move(event));
    if (!writing_) WriteNextEvent();
  }

  void WriteNextEvent() {
    if (queue_.empty() || closed_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    stream_.expires_after(server_.options.body_timeout);
    auto event = queue_.front();
    asio::async_write(stream_, asio::buffer(*event),
                      [self = this->shared_from_this(), event](beast::error_code ec, size_t) {
                        if (ec) return self->Close();
                        self->queue_.pop_front();
                        self->WriteNextEvent();
                      });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    beast::error_code ec;
    stream_.socket().shutdown(Protocol::socket::shutdown_both, ec);
    stream_.close();
  }

  HttpServer::Impl& server_;
  Stream stream_;
  Caller caller_;
  asio::steady_timer timer_;  // idle wait, or SSE keep-alive
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = false;
  bool head_ = false;  // the request being answered is a HEAD
  unsigned version_ = 11;
  bool closed_ = false;
  // Event stream state.
  uint64_t subscription_ = 0;
  std::deque<std::shared_ptr<const std::string>> queue_;
  bool writing_ = false;
  std::array<char, 512> sink_{};
};

Caller PeerOf(int fd) {
  Caller c;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    c.uid = cred.uid;
    c.gid = cred.gid;
    c.pid = cred.pid;
  }
  return c;
}

// Removes a stale socket file at `path`; kUnavailable if a daemon answers
// there, kInvalidArgument if it is not a socket.
Status ClearSocketPath(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return Status::Ok();
  if (!S_ISSOCK(st.st_mode)) {
    return InvalidArgument(path + " exists and is not a socket; refusing to replace it");
  }
  asio::io_context probe_ioc;
  UnixProtocol::socket probe(probe_ioc);
  beast::error_code ec;
  probe.connect(UnixProtocol::endpoint(path), ec);
  if (!ec) return Unavailable("another daemon is listening on " + path);
  if (unlink(path.c_str()) != 0) {
    return Unavailable("cannot remove the stale socket " + path + ": " + strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

template <typename Protocol>
void HttpServer::Impl::OnAccept(typename Protocol::socket socket, bool via_tcp) {
  if (connections.fetch_add(1, std::memory_order_relaxed) >= options.max_connections) {
    connections.fetch_sub(1, std::memory_order_relaxed);
    beast::error_code ec;
    socket.non_blocking(true, ec);
    asio::write(socket, asio::buffer(kBusyResponse.data(), kBusyResponse.size()), ec);
    socket.close(ec);
    GS_LOG(kWarn, "gpusliced", "event=connection_refused reason=\"connection cap %zu\"",
           options.max_connections);
    return;
  }
  Caller caller;
  if (via_tcp) {
    caller.via_tcp = true;
    // The connection's ends, which prove the pid a registration claims
    // (tenants/tcp_peer.h).
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    const int fd = socket.native_handle();
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      caller.tcp_client = EndpointOf(reinterpret_cast<const sockaddr*>(&address), length);
    }
    length = sizeof(address);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      caller.tcp_server = EndpointOf(reinterpret_cast<const sockaddr*>(&address), length);
    }
  } else {
    caller = PeerOf(socket.native_handle());
  }
  std::make_shared<Session<Protocol>>(*this, std::move(socket), std::move(caller))->Start();
}

void HttpServer::Impl::RetryAccept(bool tcp) {
  auto timer = std::make_shared<asio::steady_timer>(*ioc, std::chrono::milliseconds(50));
  timer->async_wait([this, timer, tcp](beast::error_code ec) {
    if (ec) return;
    tcp ? AcceptTcp() : AcceptUnix();
  });
}

void HttpServer::Impl::AcceptUnix() {
  std::lock_guard lock(unix_mu);
  const uint64_t generation = unix_generation;
  unix_acceptor->async_accept(
      asio::make_strand(*ioc),
      [this, generation](beast::error_code ec, UnixProtocol::socket socket) {
        if (ec == asio::error::operation_aborted) return;
        bool current;
        {
          std::lock_guard held(unix_mu);
          current = generation == unix_generation;
        }
        if (!current) {  // a replaced acceptor's last connection: served, no new accept
          if (!ec) OnAccept<UnixProtocol>(std::move(socket), false);
          return;
        }
        if (ec) {
          GS_LOG(kWarn, "gpusliced", "event=accept_failed error=\"%s\"", ec.message().c_str());
          return RetryAccept(false);
        }
        OnAccept<UnixProtocol>(std::move(socket), false);
        AcceptUnix();
      });
}

void HttpServer::Impl::AcceptTcp() {
  tcp_acceptor->async_accept(
      asio::make_strand(*ioc), [this](beast::error_code ec, TcpProtocol::socket socket) {
        if (ec == asio::error::operation_aborted) return;
        if (ec) {
          GS_LOG(kWarn, "gpusliced", "event=accept_failed error=\"%s\"", ec.message().c_str());
          return RetryAccept(true);
        }
        OnAccept<TcpProtocol>(std::move(socket), true);
        AcceptTcp();
      });
}

Status HttpServer::Impl::BindUnix(std::optional<UnixProtocol::acceptor>& out) {
  const ServerOptions& o = options;
  const std::filesystem::path dir = std::filesystem::path(o.socket_path).parent_path();
  if (!dir.empty()) {
    std::error_code fs_ec;
    std::filesystem::create_directories(dir, fs_ec);
  }
  GS_RETURN_IF_ERROR(ClearSocketPath(o.socket_path));
  beast::error_code ec;
  out.emplace(*ioc);
  out->open(UnixProtocol(), ec);
  if (!ec) out->bind(UnixProtocol::endpoint(o.socket_path), ec);
  if (!ec) out->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot listen on " + o.socket_path + ": " + ec.message());
  if (chmod(o.socket_path.c_str(), o.socket_mode) != 0) {
    return Unavailable("cannot chmod " + o.socket_path + ": " + strerror(errno));
  }
  if (o.socket_gid && chown(o.socket_path.c_str(), static_cast<uid_t>(-1), *o.socket_gid) != 0) {
    return Unavailable("cannot give " + o.socket_path + " to group " +
                       std::to_string(*o.socket_gid) + ": " + strerror(errno));
  }
  struct stat st {};
  if (lstat(o.socket_path.c_str(), &st) != 0) {
    return Unavailable("the socket " + o.socket_path + " vanished as it was bound");
  }
  std::lock_guard lock(unix_mu);
  socket_dev = st.st_dev;
  socket_ino = st.st_ino;
  return Status::Ok();
}

bool HttpServer::Impl::SocketIsOurs() const {
  struct stat st {};
  if (lstat(options.socket_path.c_str(), &st) != 0) return false;
  std::lock_guard lock(unix_mu);
  return st.st_dev == socket_dev && st.st_ino == socket_ino;
}

void HttpServer::Impl::WatchSocket() {
  if (options.socket_check_interval.count() <= 0) return;
  socket_timer->expires_after(options.socket_check_interval);
  socket_timer->async_wait([this](beast::error_code ec) {
    if (ec) return;  // stopping
    CheckSocket();
    WatchSocket();
  });
}

void HttpServer::Impl::CheckSocket() {
  if (SocketIsOurs()) {
    socket_failure_logged = false;
    return;
  }
  const std::string& path = options.socket_path;
  std::optional<UnixProtocol::acceptor> fresh;
  if (Status s = BindUnix(fresh); !s.ok()) {
    socket_failures.fetch_add(1, std::memory_order_relaxed);
    if (!socket_failure_logged) {  // once per loss; checked again each interval
      GS_LOG(kError, "gpusliced",
             "event=socket_recreate_failed path=%s error=\"%s\" action=retry_every_%lldms",
             path.c_str(), s.message().c_str(),
             static_cast<long long>(options.socket_check_interval.count()));
      socket_failure_logged = true;
    }
    return;
  }
  std::optional<UnixProtocol::acceptor> old;
  {
    std::lock_guard lock(unix_mu);
    old = std::move(unix_acceptor);
    unix_acceptor = std::move(fresh);
    ++unix_generation;
  }
  beast::error_code ec;
  if (old) old->close(ec);
  AcceptUnix();
  socket_failure_logged = false;
  socket_recreated.fetch_add(1, std::memory_order_relaxed);
  GS_LOG(kWarn, "gpusliced", "event=socket_recreated path=%s reason=\"the socket file was gone\"",
         path.c_str());
  hub.Publish("socket_recreated", nlohmann::json{{"path", path}}.dump());
}

HttpServer::HttpServer(ServerOptions options, const ApiRouter& router, EventHub& hub)
    : impl_(std::make_unique<Impl>(std::move(options), router, hub)) {}

HttpServer::~HttpServer() { Stop(); }

size_t HttpServer::ConnectionCount() const {
  return impl_->connections.load(std::memory_order_relaxed);
}

SocketWatch HttpServer::socket_watch() const {
  return {impl_->socket_recreated.load(std::memory_order_relaxed),
          impl_->socket_failures.load(std::memory_order_relaxed)};
}

Status HttpServer::Start() {
  Impl& s = *impl_;
  const ServerOptions& o = s.options;
  s.ioc = std::make_unique<asio::io_context>(std::max(1, o.io_threads));
  s.workers = std::make_unique<asio::thread_pool>(std::max(1, o.worker_threads));
  beast::error_code ec;

  GS_RETURN_IF_ERROR(s.BindUnix(s.unix_acceptor));
  s.AcceptUnix();
  s.socket_timer = std::make_unique<asio::steady_timer>(*s.ioc);
  s.WatchSocket();

  if (!o.tcp_host.empty()) {
    auto address = asio::ip::make_address(o.tcp_host, ec);
    if (ec) return InvalidArgument("--listen-tcp: bad address \"" + o.tcp_host + "\"");
    TcpProtocol::endpoint endpoint(address, o.tcp_port);
    s.tcp_acceptor.emplace(*s.ioc);
    s.tcp_acceptor->open(endpoint.protocol(), ec);
    if (!ec) s.tcp_acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) s.tcp_acceptor->bind(endpoint, ec);
    if (!ec) s.tcp_acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Unavailable("cannot listen on " + o.tcp_host + ":" + std::to_string(o.tcp_port) +
                         ": " + ec.message());
    }
    s.AcceptTcp();
  }
  for (int i = 0; i < std::max(1, o.io_threads); ++i) {
    s.threads.emplace_back([&s] { s.ioc->run(); });
  }
  s.running = true;
  return Status::Ok();
}

void HttpServer::Stop() {
  Impl& s = *impl_;
  if (s.ioc == nullptr) return;
  s.ioc->stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
  beast::error_code ec;
  if (s.unix_acceptor) {
    s.unix_acceptor->close(ec);
    // Only our own file: a path lost to another daemon's socket is left alone.
    if (s.running && s.SocketIsOurs()) unlink(s.options.socket_path.c_str());
  }
  if (s.tcp_acceptor) s.tcp_acceptor->close(ec);
  s.workers->join();
  s.unix_acceptor.reset();
  s.tcp_acceptor.reset();
  s.socket_timer.reset();
  s.ioc.reset();  // destroys the connections still pending
  s.workers.reset();
  s.running = false;
}

}  // namespace gpuslice::daemon
