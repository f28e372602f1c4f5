#include "server/auth.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/file_io.h"
#include "common/random.h"
#include "common/strings.h"
#include "server/api.h"

namespace gpuwatch::server {
namespace {

// Compares without an early exit, so the time taken says nothing about how much matched.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

Status CheckPrivate(const std::string& path) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0)
    return Status::IoError("cannot stat " + path + ": " + std::strerror(errno));
  if (!S_ISREG(sb.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  if (sb.st_mode & 077)
    return Status::PermissionDenied(
        fmt::format("token file {} is readable by group or others (mode {:04o}); run chmod 600 {}",
                    path, sb.st_mode & 07777, path));
  return Status::Ok();
}

Result<std::string> ReadToken(const std::string& path) {
  GW_RETURN_IF_ERROR(CheckPrivate(path));
  auto f = ReadSmallFile(path, 4096);
  if (!f.ok) return Status::IoError("cannot read " + path + ": " + std::strerror(f.err));
  std::string token(TrimWhitespace(f.data));
  if (token.size() < kMinTokenChars)
    return Status::InvalidArgument("token in " + path + " is shorter than " +
                                   std::to_string(kMinTokenChars) + " characters");
  if (token.find_first_of(" \t\r\n") != std::string::npos)
    return Status::InvalidArgument("token in " + path + " has more than one line");
  return token;
}

http::Response Refusal(int status, const std::string& message) {
  http::Response r;
  r.status = status;
  if (status == 401) r.SetHeader("WWW-Authenticate", "Bearer realm=\"gpuwatch\"");
  r.Set(DumpJson({{"error", message}}), "application/json");
  return r;
}

}  // namespace

Result<std::string> LoadOrCreateAdminToken(const std::string& path) {
  // At first start the data dir may not exist yet: the store makes it later.
  std::error_code ec;
  if (const auto parent = std::filesystem::path(path).parent_path(); !parent.empty())
    std::filesystem::create_directories(parent, ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return ReadToken(path);
    return Status::IoError("cannot create " + path + ": " + std::strerror(errno));
  }
  auto token = RandomHex(32);
  if (!token.ok()) {
    ::close(fd);
    ::unlink(path.c_str());
    return token.status();
  }
  const std::string line = *token + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    return Status::IoError("cannot write " + path + ": " + std::strerror(errno));
  }
  return *token;
}

Result<std::string> ReadTokenFile(const std::string& path) { return ReadToken(path); }

http::Authorizer MakeAuthorizer(AuthConfig config) {
  return [c = std::move(config)](const http::Request& req, http::Access access,
                                 std::string* principal) -> std::optional<http::Response> {
    if (access == http::Access::kRead) return std::nullopt;
    const std::string header = req.Header("Authorization");
    std::string_view token;
    if (header.size() > 7 &&
        http::EqualsIgnoreCase(std::string_view(header).substr(0, 7), "Bearer "))
      token = TrimWhitespace(std::string_view(header).substr(7));
    const std::string where =
        c.admin_token_path.empty() ? "" : " (the admin token is in " + c.admin_token_path + ")";
    if (c.admin_token.empty() && (access == http::Access::kAdmin || c.write_token.empty()))
      return Refusal(403, req.method + " " + req.path +
                              " changes the agent's state, and this agent has no admin token: "
                              "start it with --data-dir or --admin-token-file");
    if (token.empty())
      return Refusal(401, req.method + " " + req.path +
                              " changes the agent's state and needs Authorization: Bearer "
                              "<token>" +
                              where);
    if (!c.admin_token.empty() && ConstantTimeEquals(token, c.admin_token)) {
      *principal = "admin";
      return std::nullopt;
    }
    if (!c.write_token.empty() && ConstantTimeEquals(token, c.write_token)) {
      if (access == http::Access::kWrite) {
        *principal = "writer";
        return std::nullopt;
      }
      return Refusal(403, "the write token may send data, not " + req.method + " " + req.path +
                              "; use the admin token" + where);
    }
    return Refusal(401, "wrong token for " + req.method + " " + req.path + where);
  };
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (::inet_pton(AF_INET6, host.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return false;
}

}  // namespace gpuwatch::server
