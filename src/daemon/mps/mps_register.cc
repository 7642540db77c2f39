// RegisterMpsRoutes, apart from the handlers: it needs the daemon's ApiRouter
// (api.cc), which the handlers' unit tests do not link.
#include "daemon/mps/mps_routes.h"

namespace gpuslice::daemon::mps {

void RegisterMpsRoutes(ApiRouter& router, MpsManager& manager) {
  using Fn = ApiResponse (*)(MpsManager&, const ApiRequest&);
  auto bind = [&manager](Fn fn) {
    return [&manager, fn](const ApiRequest& request) { return fn(manager, request); };
  };
  router.Add("GET", "/v1/mps", Access::kRead, bind(HandleStatus));
  router.Add("GET", "/v1/mps/tenants", Access::kRead, bind(HandleTenants));
  router.Add("POST", "/v1/mps/acquire", Access::kMutate, bind(HandleAcquire));
  router.Add("POST", "/v1/mps/release", Access::kMutate, bind(HandleRelease));
  router.Add("POST", "/v1/mps/tenants/{tenant}/settings", Access::kMutate, bind(HandleSettings));
  router.Add("POST", "/v1/mps/terminate", Access::kMutate, bind(HandleTerminate));
}

}  // namespace gpuslice::daemon::mps
