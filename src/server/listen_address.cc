#include "server/listen_address.h"

#include "common/strings.h"

namespace gpuwatch::server {

Result<ListenAddress> ParseListenAddress(std::string_view s) {
  ListenAddress a;
  std::string_view port_part;
  if (StartsWith(s, "[")) {
    auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return Status::InvalidArgument("bad listen address '" + std::string(s) +
                                     "': expected [v6addr]:port");
    a.host = std::string(s.substr(1, close - 1));
    port_part = s.substr(close + 2);
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos)
      return Status::InvalidArgument("bad listen address '" + std::string(s) +
                                     "': expected host:port");
    a.host = std::string(s.substr(0, colon));
    port_part = s.substr(colon + 1);
    if (a.host.find(':') != std::string::npos)
      return Status::InvalidArgument("bad listen address '" + std::string(s) +
                                     "': write IPv6 as [addr]:port");
  }
  if (a.host.empty()) a.host = "0.0.0.0";
  auto port = ParseInt<int>(port_part);
  if (!port || *port < 0 || *port > 65535)
    return Status::InvalidArgument("bad port in listen address '" + std::string(s) + "'");
  a.port = *port;
  return a;
}

}  // namespace gpuwatch::server
