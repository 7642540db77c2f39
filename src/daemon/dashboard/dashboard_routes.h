// The web dashboard's routes (docs/dashboard.md), on the API's router and so
// under its rules: reads are open to whoever reaches the daemon, changes are
// the API's own (PUT /v1/groups/{id}, POST /v1/groups/{id}/pause|resume),
// authorised by the server as every mutating call.
//
//   GET /                            the page (index.html), revalidated on every visit
//   GET /dashboard/{version}/{name}  its scripts and styles, cacheable for good
//                                    (the version is a hash of their contents)
//   GET /v1/dashboard/history        the feed's kept points (DashboardFeed::History)
//   GET /v1/whoami                   who the daemon takes the caller for, and
//                                    whether it may change settings: the page
//                                    shows its controls only then
//
// Every answer carries X-Content-Type-Options: nosniff; the page also a
// Content-Security-Policy that allows scripts, styles and connections to the
// daemon itself only (no inline script or style), and no framing.
#pragma once

#include <functional>

#include "common/status.h"
#include "daemon/api/api.h"
#include "daemon/dashboard/dashboard_feed.h"

namespace gpuslice::daemon {

// The Content-Security-Policy of the page.
inline constexpr const char* kDashboardCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// `may_change`: OK when the caller may call mutating routes, else why not
// (the server's Authorize for Access::kMutate).
// REQUIRES: `feed` outlives the router.
void AddDashboardRoutes(ApiRouter& router, const DashboardFeed& feed,
                        std::function<Status(const Caller&)> may_change);

}  // namespace gpuslice::daemon
