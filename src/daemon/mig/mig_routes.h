// GET /v1/mig (docs/api.md "MIG"): each GPU's MIG mode and instances, with
// the owner of those gpusliced made.
#pragma once

#include "daemon/api/api.h"
#include "daemon/mig/mig_manager.h"

namespace gpuslice::daemon {

// REQUIRES: `mig` outlives the router's use.
void AddMigRoutes(ApiRouter& router, const MigManager& mig);

}  // namespace gpuslice::daemon
