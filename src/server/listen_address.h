// The agent's --listen address. Pure parser; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuwatch::server {

inline constexpr int kDefaultPort = 9470;

struct ListenAddress {
  std::string host;
  int port = 0;
};
// "127.0.0.1:9470", "[::1]:9470", ":9470" (all interfaces), "0.0.0.0:9470".
Result<ListenAddress> ParseListenAddress(std::string_view s);

}  // namespace gpuwatch::server
