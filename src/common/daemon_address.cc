#include "common/daemon_address.h"

namespace gpuslice {
namespace {

std::string TcpText(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp:" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

std::string DaemonAddress::Describe() const {
  return tcp() ? TcpText(host, port) : "unix:" + unix_path;
}

std::string DaemonAddress::Where() const {
  return "gpusliced at " + (tcp() ? TcpText(host, port) : unix_path);
}

}  // namespace gpuslice
