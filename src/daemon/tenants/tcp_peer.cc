#include "daemon/tenants/tcp_peer.h"

#include <dirent.h>
#include <netinet/in.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <fstream>
#include <string_view>
#include <vector>

namespace gpuslice::daemon {
namespace {

constexpr std::array<uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

// One hex word of /proc/net/tcp: the kernel prints each 32-bit word of an
// address as the host-order integer it holds (so on a little-endian machine
// 127.0.0.1 is "0100007F"), and the port as a plain hex number.
bool HexWord(std::string_view text, uint32_t& word) {
  if (text.size() != 8) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), word, 16);
  return ec == std::errc() && end == text.data() + text.size();
}

// "0100007F:1F90" (tcp) or 32 hex digits ":1F90" (tcp6).
std::optional<TcpEndpoint> ParseProcEndpoint(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view address = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  TcpEndpoint e;
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value, 16);
  if (ec != std::errc() || end != port.data() + port.size() || value > 0xffff) return std::nullopt;
  e.port = static_cast<uint16_t>(value);
  if (address.size() != 8 && address.size() != 32) return std::nullopt;
  for (size_t w = 0; w < address.size() / 8; ++w) {
    uint32_t word = 0;
    if (!HexWord(address.substr(w * 8, 8), word)) return std::nullopt;
    std::memcpy(e.address.data() + w * 4, &word, 4);  // the word's bytes, as in memory
  }
  e.v4 = address.size() == 8;
  if (!e.v4 && std::equal(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), e.address.begin())) {
    std::memmove(e.address.data(), e.address.data() + 12, 4);
    std::fill(e.address.begin() + 4, e.address.end(), 0);
    e.v4 = true;
  }
  return e;
}

// The inodes of the sockets in `table` (a /proc/<pid>/net/tcp or tcp6) from
// `client` to `server`.
std::vector<std::string> InodesOf(const std::string& table, const TcpEndpoint& client,
                                  const TcpEndpoint& server) {
  std::vector<std::string> out;
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
    std::vector<std::string_view> fields;
    std::string_view rest = line;
    while (!rest.empty()) {
      const size_t start = rest.find_first_not_of(' ');
      if (start == std::string_view::npos) break;
      rest.remove_prefix(start);
      const size_t end = std::min(rest.find(' '), rest.size());
      fields.push_back(rest.substr(0, end));
      rest.remove_prefix(end);
    }
    if (fields.size() < 10) continue;
    const auto local = ParseProcEndpoint(fields[1]);
    const auto remote = ParseProcEndpoint(fields[2]);
    if (local && remote && *local == client && *remote == server && fields[9] != "0") {
      out.emplace_back(fields[9]);
    }
  }
  return out;
}

}  // namespace

bool HoldsTcpConnection(const std::string& proc_root, pid_t pid, const TcpEndpoint& client,
                        const TcpEndpoint& server) {
  const std::string dir = proc_root + "/" + std::to_string(pid);
  std::vector<std::string> inodes = InodesOf(dir + "/net/tcp", client, server);
  for (std::string& inode : InodesOf(dir + "/net/tcp6", client, server)) {
    inodes.push_back(std::move(inode));
  }
  if (inodes.empty()) return false;
  DIR* fds = opendir((dir + "/fd").c_str());
  if (fds == nullptr) return false;
  bool held = false;
  while (const dirent* d = readdir(fds)) {
    if (d->d_name[0] == '.') continue;
    char target[64];
    const ssize_t n = readlink((dir + "/fd/" + d->d_name).c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string_view link(target, static_cast<size_t>(n));
    for (const std::string& inode : inodes) {
      if (link == "socket:[" + inode + "]") held = true;
    }
    if (held) break;
  }
  closedir(fds);
  return held;
}

}  // namespace gpuslice::daemon
