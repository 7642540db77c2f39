// Where the kubelet's plugin APIs put their sockets, under the kubelet's
// directory (gpusliced --kubelet-dir, default kDefaultKubeletDir of
// gpuslice/paths.h): the DRA plugin's own socket and its registration
// socket (the plugin watcher's directory), the device plugins' directory
// (the kubelet's registration socket and theirs) and PodResources.
#pragma once

#include <string>

#include "daemon/kubelet/claim_reader.h"
#include "gpuslice/paths.h"

namespace gpuslice::daemon::kubelet {

inline std::string DraPluginSocket(const std::string& kubelet_dir = kDefaultKubeletDir) {
  return kubelet_dir + "/plugins/" + kDriverName + "/dra.sock";
}
inline std::string DraRegistrationSocket(const std::string& kubelet_dir = kDefaultKubeletDir) {
  return kubelet_dir + "/plugins_registry/" + kDriverName + "-reg.sock";
}
inline std::string DevicePluginDir(const std::string& kubelet_dir = kDefaultKubeletDir) {
  return kubelet_dir + "/device-plugins";
}
inline std::string PodResourcesSocket(const std::string& kubelet_dir = kDefaultKubeletDir) {
  return kubelet_dir + "/pod-resources/kubelet.sock";
}

}  // namespace gpuslice::daemon::kubelet
