#include "daemon/mig/mig_routes.h"

namespace gpuslice::daemon {

void AddMigRoutes(ApiRouter& router, const MigManager& mig) {
  router.Add("GET", "/v1/mig", Access::kRead, [&mig](const ApiRequest&) {
    nlohmann::json gpus = nlohmann::json::array();
    for (uint32_t i = 0; i < mig.GpuCount(); ++i) {
      nlohmann::json g = mig.GpuJson(i);
      g["index"] = i;
      g["uuid"] = mig.GpuUuid(i);
      gpus.push_back(std::move(g));
    }
    return ApiResponse::Json(200, {{"gpus", std::move(gpus)}});
  });
}

}  // namespace gpuslice::daemon
