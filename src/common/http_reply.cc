#include "common/http_reply.h"

#include <algorithm>
#include <charconv>

namespace gpuslice {
namespace {

char LowerAscii(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoringAsciiCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return LowerAscii(x) == LowerAscii(y);
         });
}

std::string_view TrimHeaderSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// "HTTP/1.1 201 Created" (the reason may be absent): the status.
StatusOr<int> StatusLineCode(std::string_view line) {
  if (!line.starts_with("HTTP/1.") || line.size() < 12 || line[8] != ' ') {
    return InvalidArgument("not an HTTP/1.x reply");
  }
  int status = 0;
  const char* code = line.data() + 9;
  auto [end, ec] = std::from_chars(code, code + 3, status);
  if (ec != std::errc() || end != code + 3 || status < 100 || status > 599 ||
      (line.size() > 12 && line[12] != ' ')) {
    return InvalidArgument("the reply's status line is malformed");
  }
  return status;
}

}  // namespace

StatusOr<std::optional<HttpReply>> ParseHttpReply(std::string_view raw, bool at_eof,
                                                  const HttpReplyLimits& limits) {
  const size_t header_end = raw.find("\r\n\r\n");
  if (std::min(raw.size(), header_end) > limits.max_header_bytes) {
    return InvalidArgument("the reply's headers are too long");
  }
  if (header_end == std::string_view::npos) {
    if (at_eof) return InvalidArgument("the peer closed the connection before replying");
    return std::optional<HttpReply>();
  }
  const std::string_view head = raw.substr(0, header_end);
  const size_t line_end = std::min(head.find("\r\n"), head.size());
  HttpReply reply;
  auto status = StatusLineCode(head.substr(0, line_end));
  if (!status.ok()) return status.status();
  reply.status = *status;
  std::optional<size_t> content_length;
  std::string_view rest = head.substr(line_end);
  while (!rest.empty()) {
    rest.remove_prefix(std::min<size_t>(2, rest.size()));  // "\r\n"
    const size_t next = std::min(rest.find("\r\n"), rest.size());
    const std::string_view line = rest.substr(0, next);
    rest.remove_prefix(next);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = TrimHeaderSpace(line.substr(0, colon));
    const std::string_view value = TrimHeaderSpace(line.substr(colon + 1));
    if (EqualsIgnoringAsciiCase(name, "content-length")) {
      size_t n = 0;
      auto [p, e] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (e != std::errc() || p != value.data() + value.size() || value.empty()) {
        return InvalidArgument("the reply's Content-Length is malformed");
      }
      content_length = n;
    } else if (EqualsIgnoringAsciiCase(name, "transfer-encoding") &&
               !EqualsIgnoringAsciiCase(value, "identity")) {
      return InvalidArgument("the reply uses a transfer encoding this client does not read");
    }
    std::string key(name);
    std::transform(key.begin(), key.end(), key.begin(), LowerAscii);
    reply.headers[std::move(key)] = std::string(value);
  }
  if (limits.head) return std::optional<HttpReply>(std::move(reply));
  const std::string_view body = raw.substr(header_end + 4);
  if (content_length) {
    if (*content_length > limits.max_body_bytes) {
      return InvalidArgument("the reply's body is too large");
    }
    if (body.size() < *content_length) {
      if (at_eof) return InvalidArgument("the peer closed the connection mid-reply");
      return std::optional<HttpReply>();
    }
    reply.body = std::string(body.substr(0, *content_length));
    return std::optional<HttpReply>(std::move(reply));
  }
  if (body.size() > limits.max_body_bytes) return InvalidArgument("the reply's body is too large");
  if (!at_eof) return std::optional<HttpReply>();
  reply.body = std::string(body);
  return std::optional<HttpReply>(std::move(reply));
}

}  // namespace gpuslice
