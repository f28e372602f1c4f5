// Test helper: a TCP connection to a server on 127.0.0.1.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace gpuwatch::http::testing {

// A connected socket, or -1. `recv_timeout_s` > 0 bounds each blocking read, so a test whose
// server never answers fails instead of hanging.
inline int ConnectLoopback(int port, int recv_timeout_s = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  if (recv_timeout_s > 0) {
    timeval tv{recv_timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  return fd;
}

}  // namespace gpuwatch::http::testing
