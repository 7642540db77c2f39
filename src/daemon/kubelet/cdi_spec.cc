#include "daemon/kubelet/cdi_spec.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "shm/segment_dirs.h"

namespace gpuslice::daemon::kubelet {

using nlohmann::json;

std::string CdiDeviceId(const std::string& claim_uid) {
  return std::string(kCdiKind) + "=" + claim_uid;
}

std::string CdiSpecPath(const std::string& dir, const std::string& claim_uid) {
  return dir + "/" + kDriverName + "-" + claim_uid + ".json";
}

namespace {

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

json BindMount(const std::string& path, bool read_only) {
  json options = json::array({"bind", "nosuid", "nodev"});
  if (read_only) options.push_back("ro");
  return json{{"hostPath", path}, {"containerPath", path}, {"type", "bind"}, {"options", options}};
}

}  // namespace

json CdiSpecFor(const Allocation& a, const CdiOptions& options,
                const std::map<std::string, uint32_t>& gpu_index) {
  json memory = json::object();
  json compute = json::object();
  std::vector<std::string> uuids;
  for (const auto& [uuid, limit] : LimitsOf(a)) {
    uuids.push_back(uuid);
    if (limit.memory_bytes) memory[uuid] = std::to_string(*limit.memory_bytes);
    if (limit.compute_percent) compute[uuid] = std::to_string(*limit.compute_percent);
  }
  std::string visible;
  for (const std::string& u : uuids) visible += (visible.empty() ? "" : ",") + u;

  json env = json::array();
  env.push_back("GPUSLICE_GROUP=" + a.claim_uid);
  if (!memory.empty()) env.push_back("GPUSLICE_MEMORY_LIMIT=" + memory.dump());
  if (!compute.empty()) env.push_back("GPUSLICE_COMPUTE_LIMIT=" + compute.dump());
  env.push_back(std::string(kEnvDaemonSocket) + "=" + options.daemon_socket);
  // The claim's own segment directory, nothing else of the shared one
  // (shm/segment_dirs.h, docs/security.md).
  const std::string segments = ClaimSegmentDir(options.shm_dir, a.claim_uid);
  env.push_back(std::string(kEnvShmDir) + "=" + segments);
  env.push_back("NVIDIA_VISIBLE_DEVICES=" + visible);
  json mounts = json::array();
  mounts.push_back(BindMount(options.library, /*read_only=*/true));
  if (options.ld_so_preload.empty()) {
    env.push_back("LD_PRELOAD=" + options.library);
  } else {
    json m = BindMount(options.ld_so_preload, /*read_only=*/true);
    m["containerPath"] = "/etc/ld.so.preload";
    mounts.push_back(std::move(m));
  }
  mounts.push_back(BindMount(DirOf(options.daemon_socket), /*read_only=*/false));
  mounts.push_back(BindMount(segments, /*read_only=*/false));

  json nodes = json::array();
  std::set<std::string> paths;
  for (const std::string& u : uuids) {
    auto it = gpu_index.find(u);
    if (it != gpu_index.end()) paths.insert("/nvidia" + std::to_string(it->second));
  }
  if (!paths.empty()) paths.insert({"/nvidiactl", "/nvidia-uvm", "/nvidia-uvm-tools"});
  for (const std::string& p : paths) {
    struct stat st {};
    if (stat((options.dev_root + p).c_str(), &st) == 0) {
      nodes.push_back(json{{"path", "/dev" + p}, {"hostPath", options.dev_root + p}});
    }
  }
  json edits{{"env", env}, {"mounts", mounts}};
  if (!nodes.empty()) edits["deviceNodes"] = nodes;
  return json{{"cdiVersion", kCdiVersion},
              {"kind", kCdiKind},
              {"devices", json::array({json{{"name", a.claim_uid}, {"containerEdits", edits}}})}};
}

Status WriteCdiSpec(const Allocation& a, const CdiOptions& options,
                    const std::map<std::string, uint32_t>& gpu_index) {
  GS_RETURN_IF_ERROR(MakeClaimSegmentDir(options.shm_dir, a.claim_uid));
  return WriteCdiFile(CdiSpecPath(options.dir, a.claim_uid), CdiSpecFor(a, options, gpu_index));
}

Status WriteCdiFile(const std::string& path, const json& spec) {
  std::error_code ec;
  std::filesystem::create_directories(DirOf(path), ec);
  const std::string tmp = path + ".tmp";
  const std::string text = spec.dump(2) + "\n";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable("cannot write " + tmp + ": " + strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string message = "cannot write " + tmp;
      message += ": ";
      message += strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return Unavailable(message);
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!synced || rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = strerror(errno);
    unlink(tmp.c_str());
    return Unavailable("cannot replace " + path + ": " + why);
  }
  return Status::Ok();
}

std::string CdiMpsDeviceId(const std::string& group) {
  return std::string(kCdiMpsKind) + "=" + group;
}

std::string CdiMpsSpecPath(const std::string& dir, const std::string& group) {
  return dir + "/" + kDriverName + "-mps-" + group + ".json";
}

std::vector<std::string> MpsDirs(const std::map<std::string, std::string>& env) {
  std::vector<std::string> dirs;
  if (auto it = env.find("CUDA_MPS_PIPE_DIRECTORY"); it != env.end() && !it->second.empty()) {
    dirs.push_back(it->second);
  }
  return dirs;
}

json CdiMpsSpecFor(const std::string& group, const std::map<std::string, std::string>& env,
                   const std::vector<std::string>& dirs) {
  json vars = json::array();
  for (const auto& [name, value] : env) {
    std::string entry = name;
    entry += "=";
    entry += value;
    vars.push_back(std::move(entry));
  }
  if (vars.empty()) vars.push_back("GPUSLICE_MPS=off");
  json edits{{"env", vars}};
  if (!dirs.empty()) {
    json mounts = json::array();
    for (const std::string& d : dirs) mounts.push_back(BindMount(d, /*read_only=*/false));
    edits["mounts"] = mounts;
  }
  return json{{"cdiVersion", kCdiVersion},
              {"kind", kCdiMpsKind},
              {"devices", json::array({json{{"name", group}, {"containerEdits", edits}}})}};
}

Status RemoveCdiSpec(const std::string& dir, const std::string& claim_uid) {
  return RemoveCdiFile(CdiSpecPath(dir, claim_uid));
}

Status RemoveCdiFile(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Unavailable("cannot remove " + path + ": " + strerror(errno));
  }
  return Status::Ok();
}

std::map<std::string, std::string> CdiEnv(const json& spec) {
  std::map<std::string, std::string> env;
  for (const json& device : spec.value("devices", json::array())) {
    for (const json& e :
         device.value("containerEdits", json::object()).value("env", json::array())) {
      if (!e.is_string()) continue;
      const std::string s = e.get<std::string>();
      const size_t eq = s.find('=');
      if (eq != std::string::npos) env[s.substr(0, eq)] = s.substr(eq + 1);
    }
  }
  return env;
}

}  // namespace gpuslice::daemon::kubelet
