// The MPS part of the daemon's HTTP/JSON API (docs/mps.md has the shapes):
//   GET  /v1/mps                              availability and per-GPU daemons
//   GET  /v1/mps/tenants                      tenants, their tier and settings
//   POST /v1/mps/acquire                      {"tenant", "gpus", settings...} -> tier + env
//   POST /v1/mps/release                      {"tenant"}
//   POST /v1/mps/tenants/{tenant}/settings    {settings...} -> new env
//   POST /v1/mps/terminate                    {"gpu", "client_pid"}
// Handlers are free functions of the manager and a request, so they are
// unit-tested without the HTTP server. Errors are ApiResponse::FromStatus:
// {"error": {"code": "INVALID_ARGUMENT", "message": ...}} with 400 (bad input),
// 404 (unknown GPU or tenant), 409 (tenant holds other GPUs), 503, or 500.
//
// Thread safety: as MpsManager's (any thread).
#pragma once

#include "daemon/api/api.h"
#include "daemon/mps/mps_manager.h"

namespace gpuslice::daemon::mps {

ApiResponse HandleStatus(MpsManager& manager, const ApiRequest& request);
ApiResponse HandleTenants(MpsManager& manager, const ApiRequest& request);
ApiResponse HandleAcquire(MpsManager& manager, const ApiRequest& request);
ApiResponse HandleRelease(MpsManager& manager, const ApiRequest& request);
ApiResponse HandleSettings(MpsManager& manager, const ApiRequest& request);
ApiResponse HandleTerminate(MpsManager& manager, const ApiRequest& request);

// Adds the routes above to `router` (mutating ones with Access::kMutate).
// `manager` must outlive the router.
void RegisterMpsRoutes(ApiRouter& router, MpsManager& manager);

}  // namespace gpuslice::daemon::mps
