// Who may read and change the agent's (and the hub's) state (issue 17, D2; issue 19; docs/
// limits.md, "Tokens").
//
// Every route that changes state needs `Authorization: Bearer <token>`, even on loopback,
// because on a shared node every local user reaches loopback. Reads need a token too whenever
// the server listens beyond loopback or a tokens file is configured (`reads_need_token`); on
// loopback with no tokens file they stay open, as Prometheus's scrape and Grafana expect, and
// the agent logs that they are. /healthz and the dashboard's static files are public. Tokens:
//   - the admin token, <data-dir>/admin.token, made at first start (0600, the agent's user): it
//     may do everything;
//   - an optional write token (--write-token-file) that may only write data (remote-write,
//     events), for senders that should not be able to silence alerts;
//   - the tokens file (--tokens, server/tokens.h): read, write and admin tokens, each optionally
//     confined to projects (the request's `scope`, enforced by server/scope.h).
// Failed attempts are counted per source address: after `max_failures` in `window` the address
// gets 429 with Retry-After for `block`, whatever it sends, so a token cannot be guessed.
// The principal a request authenticated as ("admin", "writer", "read@tokens:3") is what the
// agent records as the author of what it changed, never a name the client sent, and never the
// token itself.
// Thread-safety: the authorizer may be called from any thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "http/server.h"
#include "server/tokens.h"

namespace gpuwatch::server {

struct AuthFailureLimits {
  int max_failures = 10;  // wrong tokens from one address within `window` before it is blocked
  std::chrono::seconds window{60};
  std::chrono::seconds block{60};
  size_t max_sources = 4096;  // addresses remembered; memory stays bounded under a scan
};

struct AuthConfig {
  std::string admin_token;             // empty: no admin token; admin routes are refused
  std::string write_token;             // empty: none
  std::string admin_token_path;        // named in refusals, so an operator knows where to look
  std::shared_ptr<TokensFile> tokens;  // --tokens; null: none
  bool reads_need_token = false;       // beyond loopback, or a tokens file
  AuthFailureLimits failures;
};

// Failed attempts per source address (the authorizer's brute-force guard).
class AuthFailureLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit AuthFailureLimiter(AuthFailureLimits limits) : limits_(limits) {}
  // Whole seconds `source` must still wait (at least 1), or 0 when it may try now.
  int64_t BlockedSeconds(const std::string& source, Clock::time_point now);
  void RecordFailure(const std::string& source, Clock::time_point now);
  size_t sources() const;

 private:
  struct Entry {
    int failures = 0;
    Clock::time_point window_start, blocked_until;
  };
  AuthFailureLimits limits_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> by_source_;
};

inline constexpr char kAdminTokenFile[] = "admin.token";
inline constexpr size_t kMinTokenChars = 16;

// Reads the token at `path`, or creates it (32 random bytes as hex, mode 0600, O_EXCL) when it
// does not exist. A token file readable by group or others is refused: it would not be secret.
Result<std::string> LoadOrCreateAdminToken(const std::string& path);
// Reads a token file made by the operator: one line, at least 16 characters, not readable by
// group or others.
Result<std::string> ReadTokenFile(const std::string& path);

// The http::Server authorizer for `config`. A 401 says why (no token, wrong, expired) and
// where the token is; a 403 says what the token's role or scope does not allow.
http::Authorizer MakeAuthorizer(AuthConfig config);

// Whether `host` (a --listen host) binds loopback only: 127.0.0.0/8, ::1 or "localhost".
bool IsLoopbackHost(const std::string& host);

}  // namespace gpuwatch::server
