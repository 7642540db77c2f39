// HTTP-independent pieces of the server, unit-tested on their own: request
// targets, caller authorisation, bearer tokens.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/api/api.h"

namespace gpuslice::daemon {

struct Target {
  std::string path;
  std::map<std::string, std::string> query;
};
// "/v1/gpus/0?wait=false" -> path and decoded query. %XX and '+' are decoded;
// kInvalidArgument for a malformed escape or a target that is not a path.
StatusOr<Target> ParseTarget(std::string_view target);

struct AuthPolicy {
  std::optional<gid_t> admin_gid;  // members may mutate over the Unix socket
  // Whether user `uid` (primary group `gid`) belongs to group `group`.
  std::function<bool(uid_t uid, gid_t gid, gid_t group)> in_group;
};

// OK when `caller` may call a route of `access`: reads are open to anyone
// who can reach the socket; mutations need root, the admin group, or (TCP) a
// valid bearer token. kPermissionDenied explaining what is missing otherwise.
Status Authorize(const Caller& caller, Access access, const AuthPolicy& policy);

// OK unless a browser says the request comes from another site: a request
// that changes state and carries an Origin header (`origin`) must come from
// the page's own host (`host`, the Host header), so that a page elsewhere
// cannot use a browser that reaches the daemon (a forwarded socket, a local
// port) to change settings. kPermissionDenied naming both otherwise. Requests
// without an Origin (curl, the CLI) are not browsers' and are not checked.
Status CheckSameOrigin(std::string_view origin, std::string_view host);

// The real group lookup: primary group or supplementary groups of the user
// (getpwuid_r + getgrouplist).
bool UserInGroup(uid_t uid, gid_t gid, gid_t group);

// Tokens from a file: one per line; blank lines and lines starting with '#'
// are ignored. kInvalidArgument for an unreadable or empty file.
StatusOr<std::set<std::string>> LoadTokens(const std::string& path);
// "Bearer <token>" with a token in `tokens` (compared in constant time).
bool BearerTokenValid(std::string_view authorization, const std::set<std::string>& tokens);

}  // namespace gpuslice::daemon
