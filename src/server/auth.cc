#include "server/auth.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/file_io.h"
#include "common/random.h"
#include "common/strings.h"
#include "common/time_base.h"
#include "server/api.h"
#include "server/scope.h"

namespace gpuwatch::server {
namespace {

Result<std::string> ReadToken(const std::string& path) {
  GW_RETURN_IF_ERROR(CheckSecretFile(path));
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

int64_t AuthFailureLimiter::BlockedSeconds(const std::string& source, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_source_.find(source);
  if (it == by_source_.end() || it->second.blocked_until <= now) return 0;
  const auto left = std::chrono::ceil<std::chrono::seconds>(it->second.blocked_until - now);
  return std::max<int64_t>(1, left.count());
}

void AuthFailureLimiter::RecordFailure(const std::string& source, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_source_.find(source);
  if (it == by_source_.end()) {
    if (by_source_.size() >= limits_.max_sources) {
      // Forget the addresses that are neither blocked nor inside a window; if a scan from many
      // addresses still fills the map, forget the one whose window is oldest.
      std::erase_if(by_source_, [&](const auto& kv) {
        return kv.second.blocked_until <= now && kv.second.window_start + limits_.window <= now;
      });
      if (by_source_.size() >= limits_.max_sources) {
        auto oldest = by_source_.begin();
        for (auto j = by_source_.begin(); j != by_source_.end(); ++j)
          if (j->second.window_start < oldest->second.window_start) oldest = j;
        by_source_.erase(oldest);
      }
    }
    it = by_source_.emplace(source, Entry{0, now, {}}).first;
  }
  Entry& e = it->second;
  if (e.window_start + limits_.window <= now) {
    e.window_start = now;
    e.failures = 0;
  }
  if (++e.failures >= limits_.max_failures) {
    e.blocked_until = now + limits_.block;
    e.failures = 0;
    e.window_start = now;
  }
}

size_t AuthFailureLimiter::sources() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_source_.size();
}

http::Authorizer MakeAuthorizer(AuthConfig config) {
  auto limiter = std::make_shared<AuthFailureLimiter>(config.failures);
  return [c = std::move(config), limiter](
             http::Request& req, const http::RouteOptions& route) -> std::optional<http::Response> {
    using http::Access;
    const Access access = route.access;
    if (access == Access::kPublic) return std::nullopt;
    if (access == Access::kRead && !c.reads_need_token) return std::nullopt;
    const auto now = AuthFailureLimiter::Clock::now();
    if (const int64_t wait_s = limiter->BlockedSeconds(req.remote_address, now)) {
      http::Response r =
          Refusal(429, "too many requests with a wrong token from " + req.remote_address +
                           "; retry in " + std::to_string(wait_s) + " s");
      r.SetHeader("Retry-After", std::to_string(wait_s));
      return r;
    }
    const std::string header = req.Header("Authorization");
    std::string_view token;
    if (header.size() > 7 &&
        http::EqualsIgnoreCase(std::string_view(header).substr(0, 7), "Bearer "))
      token = TrimWhitespace(std::string_view(header).substr(7));
    std::string where;
    if (c.tokens) where = c.tokens->path();
    if (!c.admin_token_path.empty()) where += (where.empty() ? "" : " or ") + c.admin_token_path;
    where = where.empty() ? "" : " (tokens are in " + where + ")";
    const std::string what = req.method + " " + req.path;
    const bool any_token = !c.admin_token.empty() || !c.write_token.empty() || c.tokens;
    if (!any_token)
      return Refusal(403, what +
                              " changes the agent's state, and this agent has no admin token: "
                              "start it with --data-dir, --admin-token-file or --tokens");
    if (token.empty())
      return Refusal(401, what + (access == Access::kRead ? " needs" : " changes state and needs") +
                              " Authorization: Bearer <token>" + where);

    // Who is it? The tokens file is checked even when an earlier token matched, so the time
    // taken does not say which kind of token was sent.
    std::shared_ptr<const TokenTable> table = c.tokens ? c.tokens->Current() : nullptr;
    const TokenEntry* entry = table ? table->Find(token) : nullptr;
    Role role = Role::kRead;
    std::string principal;
    std::vector<std::string> scope;
    if (!c.admin_token.empty() && TokensEqual(token, c.admin_token)) {
      role = Role::kAdmin;
      principal = "admin";
    } else if (!c.write_token.empty() && TokensEqual(token, c.write_token)) {
      role = Role::kWrite;
      principal = "writer";
    } else if (entry) {
      if (entry->expires_ms && *entry->expires_ms <= WallClockMs())
        return Refusal(401, "the token on line " + std::to_string(entry->line) + " of " +
                                c.tokens->path() + " expired at " + FormatUtc(*entry->expires_ms));
      role = entry->role;
      principal = entry->principal;
      scope = entry->projects;
    } else {
      limiter->RecordFailure(req.remote_address, now);
      return Refusal(401, "wrong token for " + what + where);
    }

    const bool allowed = role == Role::kAdmin || (role == Role::kRead && access == Access::kRead) ||
                         (role == Role::kWrite && access == Access::kWrite);
    if (!allowed)
      return Refusal(403, "a " + std::string(RoleName(role)) + " token (" + principal +
                              ") may not " + what +
                              (access == Access::kAdmin   ? ": it needs an admin token"
                               : access == Access::kWrite ? ": it needs a write or admin token"
                                                          : ": it needs a read or admin token"));
    if (!scope.empty() && access == Access::kAdmin)
      return Refusal(403, principal + " is confined to projects " + ProjectList(scope) +
                              " and may not " + what + ", which acts on the whole node");
    if (!scope.empty() && !route.allow_scoped)
      return Refusal(403, principal + " is confined to projects (" + ProjectList(scope) +
                              "): " + req.path + " shows the whole node, not one project's jobs");
    req.principal = std::move(principal);
    req.scope = std::move(scope);
    return std::nullopt;
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
