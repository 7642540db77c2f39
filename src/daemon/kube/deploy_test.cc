// deploy/gpusliced.yaml against the daemon it starts: the DaemonSet's
// arguments, read by the daemon's own config code over its defaults, must
// turn on what the examples in deploy/examples/ need (the DRA kubelet
// plugin, the device plugins, the node's pod watch), and every host path
// that configuration uses (the kubelet's sockets, the CDI specs, the
// limiter library the specs mount, the segments, the socket, the state)
// must be mounted from the same path on the host: the CDI specs and the
// kubelet name host paths, so the daemon's view must be the host's.
// The YAML is read with the validator's js-yaml (deploy/node_modules).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/kube/kube_test_util.h"

namespace gpuslice::daemon::kube {
namespace {

using nlohmann::json;

// The gpusliced container of the DaemonSet and the pod's volumes, or null.
json DaemonSetPod(const std::string& source, const std::string& out) {
  const std::string cmd = "cd " + source +
                          "/deploy && node -e '"
                          "const y=require(\"js-yaml\"),fs=require(\"fs\");"
                          "const d=y.loadAll(fs.readFileSync(\"gpusliced.yaml\",\"utf8\"))"
                          ".find(o=>o&&o.kind===\"DaemonSet\");"
                          "fs.writeFileSync(process.argv[1],JSON.stringify(d.spec.template.spec))'"
                          " " +
                          out;
  if (std::system(cmd.c_str()) != 0) return nullptr;  // NOLINT(concurrency-mt-unsafe)
  std::ifstream in(out);
  return json::parse(in, nullptr, false);
}

// "--key=value" and "--flag" as ApplyConfigJson's keys ("key", true).
json ArgsAsConfig(const json& args) {
  json config = json::object();
  for (const json& a : args) {
    std::string arg = a.get<std::string>();
    if (!arg.starts_with("--")) continue;
    arg = arg.substr(2);
    const auto eq = arg.find('=');
    std::string key = arg.substr(0, eq);
    for (char& c : key) c = c == '-' ? '_' : c;
    if (eq == std::string::npos) {
      config[key] = true;
      continue;
    }
    const std::string value = arg.substr(eq + 1);
    // Numbers are numbers in the config file.
    if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos &&
        key != "socket_mode") {
      config[key] = std::stoll(value);
    } else {
      config[key] = value;
    }
  }
  return config;
}

TEST(DeployManifest, TheDaemonSetServesTheKubeletAndMountsEveryHostPathItUses) {
  const std::string source = GPUSLICE_SOURCE_DIR;
  if (!std::filesystem::exists(source + "/deploy/node_modules/js-yaml")) {
    GTEST_SKIP() << "deploy/node_modules is missing (scripts/setup installs it)";
  }
  TempDir dir;
  const json pod = DaemonSetPod(source, dir.path() + "/pod.json");
  ASSERT_TRUE(pod.is_object()) << "cannot read the DaemonSet of deploy/gpusliced.yaml";
  json container;
  for (const json& c : pod["containers"]) {
    if (c.value("name", "") == "gpusliced") container = c;
  }
  ASSERT_TRUE(container.is_object()) << pod.dump();

  DaemonConfig config;
  const json args = ArgsAsConfig(container.value("args", json::array()));
  const Status applied = ApplyConfigJson(args, config);
  ASSERT_TRUE(applied.ok()) << applied.ToString() << " " << args.dump();
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).ToString();
  EXPECT_FALSE(config.kube_node.empty()) << "no --kube-node: no pod watch, no ResourceSlices";
  EXPECT_TRUE(config.dra) << "no --dra: deploy/examples/dra-claim-pod.yaml cannot run";
  EXPECT_TRUE(config.device_plugin)
      << "no --device-plugin: deploy/examples/device-plugin-pod.yaml cannot run";
  EXPECT_TRUE(config.dra_claims_dir.empty()) << "claims must come from the API server";

  // volume name -> host path
  std::map<std::string, std::string> host;
  for (const json& v : pod["volumes"]) {
    if (v.contains("hostPath")) host[v["name"]] = v["hostPath"]["path"];
  }
  auto mounted_from_host = [&](const std::string& path) {
    for (const json& m : container["volumeMounts"]) {
      const std::string at = m["mountPath"];
      if (path != at && !path.starts_with(at + "/")) continue;
      auto h = host.find(m["name"]);
      return h != host.end() && h->second == at;
    }
    return false;
  };
  auto parent = [](const std::string& path) {
    return std::filesystem::path(path).parent_path().string();
  };
  const std::vector<std::pair<std::string, std::string>> uses = {
      {config.kubelet_dir + "/plugins_registry", "the DRA plugin's registration socket"},
      {config.kubelet_dir + "/plugins", "the DRA plugin's socket"},
      {config.kubelet_dir + "/device-plugins", "the device plugins' and the kubelet's sockets"},
      {config.kubelet_dir + "/pod-resources", "the kubelet's PodResources socket"},
      {config.cdi_dir, "the CDI specs the container runtime reads"},
      {parent(config.limiter_library), "the limiter library the CDI specs mount"},
      {config.shm_dir, "the group segments"},
      {parent(config.socket), "the daemon's socket"},
      {config.mps_root, "the MPS pipe directories the CDI specs mount"},
      {config.state_dir, "the checkpoints"},
      {config.cgroup_root, "the pods' cgroups"},
  };
  for (const auto& [path, what] : uses) {
    EXPECT_FALSE(path.empty()) << what;
    EXPECT_TRUE(mounted_from_host(path))
        << path << " (" << what << ") is not mounted from the same host path";
  }
}

}  // namespace
}  // namespace gpuslice::daemon::kube
