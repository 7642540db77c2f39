#include "limiter/keeper_thread.h"

#include <pthread.h>
#include <unistd.h>

#include <csignal>

#include "common/clock.h"
#include "common/log.h"
#include "control/compute_controller.h"
#include "control/group_keeper.h"
#include "limiter/nvml_utilization_source.h"

namespace gpuslice::limiter {
namespace {

struct Args {
  GroupSegment* segment;
  std::string daemon_socket;
};

void* Run(void* arg) {
  auto* args = static_cast<Args*>(arg);
  GroupSegment* segment = args->segment;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  // Never destroyed: the thread may run until the process is gone, after
  // static destructors.
  auto* realtime = new RealtimeClock;
  auto* monotonic = new MonotonicClock;
  auto* nvml = new NvmlUtilizationSource;
  // NVML reports host pids, the slots hold this namespace's: they match
  // outside containers (inside one, see ComputeController). Each member is
  // charged by its own samples.
  auto* compute = new control::ComputeController(*segment, *nvml,
                                                 control::ComputeController::SlotMembers(*segment),
                                                 {*realtime, *monotonic}, nvml);
  auto* keeper = new control::GroupKeeper(*segment, *compute, *monotonic);
  if (!args->daemon_socket.empty()) {
    keeper->set_daemon_expected(
        [socket = args->daemon_socket] { return access(socket.c_str(), F_OK) == 0; });
  }
  keeper->RunForever();
  return nullptr;
}

}  // namespace

bool StartKeeperThread(GroupSegment* segment, std::string daemon_socket) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, size_t{256} * 1024);
  pthread_t thread;
  auto* args = new Args{segment, std::move(daemon_socket)};
  const int rc = pthread_create(&thread, &attr, &Run, args);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    delete args;
    GS_LOG(kWarn, "limiter", "cannot start the group keeper thread (error %d)", rc);
    return false;
  }
  pthread_setname_np(thread, "gpuslice-keeper");
  return true;
}

}  // namespace gpuslice::limiter
