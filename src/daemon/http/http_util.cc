#include "daemon/http/http_util.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <vector>

namespace gpuslice::daemon {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

StatusOr<std::string> Decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      const int hi = i + 2 < s.size() ? HexValue(s[i + 1]) : -1;
      const int lo = i + 2 < s.size() ? HexValue(s[i + 2]) : -1;
      if (hi < 0 || lo < 0) return InvalidArgument("malformed %-escape in the request target");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (s[i] == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

}  // namespace

StatusOr<Target> ParseTarget(std::string_view target) {
  if (target.empty() || target.front() != '/') {
    return InvalidArgument("the request target must be a path starting with /");
  }
  Target t;
  const size_t q = target.find('?');
  GS_ASSIGN_OR_RETURN(t.path, Decode(target.substr(0, q), false));
  if (q == std::string_view::npos) return t;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    if (!pair.empty()) {
      const size_t eq = pair.find('=');
      GS_ASSIGN_OR_RETURN(std::string key, Decode(pair.substr(0, eq), true));
      std::string value;
      if (eq != std::string_view::npos) {
        GS_ASSIGN_OR_RETURN(value, Decode(pair.substr(eq + 1), true));
      }
      t.query[key] = value;
    }
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return t;
}

Status Authorize(const Caller& caller, Access access, const AuthPolicy& policy) {
  if (access == Access::kRead) return Status::Ok();
  if (caller.via_tcp) {
    if (caller.token_ok) return Status::Ok();
    return PermissionDenied("changing settings over TCP needs a valid bearer token");
  }
  if (!caller.uid) return PermissionDenied("the caller could not be identified");
  if (*caller.uid == 0) return Status::Ok();
  if (policy.admin_gid && caller.gid && policy.in_group &&
      policy.in_group(*caller.uid, *caller.gid, *policy.admin_gid)) {
    return Status::Ok();
  }
  return PermissionDenied(
      "uid " + std::to_string(*caller.uid) + " may not change settings: this needs root" +
      (policy.admin_gid
           ? " or membership of the admin group (gid " + std::to_string(*policy.admin_gid) + ")"
           : std::string()));
}

bool UserInGroup(uid_t uid, gid_t gid, gid_t group) {
  if (gid == group) return true;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* result = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &result) != 0 || result == nullptr) {
    return false;
  }
  int count = 64;
  std::vector<gid_t> groups(count);
  if (getgrouplist(pw.pw_name, gid, groups.data(), &count) < 0) {
    groups.resize(count);
    if (getgrouplist(pw.pw_name, gid, groups.data(), &count) < 0) return false;
  }
  for (int i = 0; i < count; ++i) {
    if (groups[i] == group) return true;
  }
  return false;
}

StatusOr<std::set<std::string>> LoadTokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("cannot read the token file " + path);
  std::set<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    tokens.insert(line);
  }
  if (tokens.empty()) return InvalidArgument("the token file " + path + " holds no token");
  return tokens;
}

Status CheckSameOrigin(std::string_view origin, std::string_view host) {
  std::string_view origin_host = origin;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (origin_host.starts_with(scheme)) origin_host.remove_prefix(scheme.size());
  }
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  if (origin_host.size() < origin.size() && !host.empty() && lower(origin_host) == lower(host)) {
    return Status::Ok();
  }
  return PermissionDenied("a request from another site (Origin \"" + std::string(origin) +
                          "\", Host \"" + std::string(host) + "\") may not change settings");
}

bool BearerTokenValid(std::string_view authorization, const std::set<std::string>& tokens) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.substr(0, kPrefix.size()) != kPrefix) return false;
  const std::string_view presented = authorization.substr(kPrefix.size());
  bool found = false;
  for (const std::string& t : tokens) {
    // Constant time per candidate of the same length.
    unsigned diff = t.size() != presented.size() ? 1 : 0;
    for (size_t i = 0; i < t.size() && i < presented.size(); ++i) {
      diff |= static_cast<unsigned>(t[i] ^ presented[i]);
    }
    found = found || diff == 0;
  }
  return found;
}

}  // namespace gpuslice::daemon
