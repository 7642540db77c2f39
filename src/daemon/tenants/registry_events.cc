// The registry's events in their JSON form (registry.h, RegistryEventJson).
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "daemon/tenants/registry.h"

namespace gpuslice::daemon {

std::string_view ExitReasonName(ExitReason reason) {
  switch (reason) {
    case ExitReason::kExited:
      return "exited";
    case ExitReason::kUnregistered:
      return "unregistered";
    case ExitReason::kGoneAtRestart:
      return "gone_at_restart";
  }
  return "exited";
}

void RegistryEventJson::OnTenantRegistered(const TenantRegistered& event) {
  sink_("tenant_registered", TenantJson(event.tenant));
}

void RegistryEventJson::OnRegistrationRefused(const RegistrationRefused& event) {
  sink_("registration_refused",
        {{"pid", event.pid},
         {"uid", event.uid ? nlohmann::json(*event.uid) : nlohmann::json(nullptr)},
         {"group", event.group},
         {"code", std::string(StatusCodeName(event.why.code()))},
         {"reason", event.why.message()}});
}

void RegistryEventJson::OnTenantExited(const TenantExited& event) {
  sink_("tenant_exited", {{"host_pid", event.host_pid},
                          {"group", event.group},
                          {"reason", std::string(ExitReasonName(event.reason))}});
}

void RegistryEventJson::OnLimitsChanged(const GroupLimitsChanged& event) {
  sink_("group_limits_changed", GroupJson(event.group));
}

void RegistryEventJson::OnScheduleChanged(const GroupScheduleChanged& event) {
  sink_("group_schedule_changed", {{"group", event.group.id},
                                   {"schedule", GroupJson(event.group)["schedule"]},
                                   {"paused", event.group.paused}});
}

void RegistryEventJson::OnPauseChanged(const GroupPauseChanged& event) {
  sink_(event.paused ? "group_paused" : "group_resumed", {{"group", event.group}});
}

void RegistryEventJson::OnGroupForgotten(const GroupForgotten& event) {
  sink_("group_forgotten", {{"group", event.group}});
}

}  // namespace gpuslice::daemon
