// Who may change the agent's state (issue 17, D2; docs/limits.md, "Tokens").
//
// Reads stay open (Prometheus scrapes /metrics, Grafana queries); every route that changes
// state needs `Authorization: Bearer <token>`, even on loopback, because on a shared node every
// local user reaches loopback. Two tokens:
//   - the admin token, <data-dir>/admin.token, made at first start (0600, the agent's user): it
//     may do everything (silences, maintenance, snapshots, events, remote-write);
//   - an optional write token (--write-token-file) that may only write data (remote-write,
//     events), for senders that should not be able to silence alerts.
// The principal a request authenticated as ("admin", "writer") is what the agent records as
// the author of what it changed, never a name the client sent.
// Thread-safety: the authorizer is immutable once made.
#pragma once

#include <string>

#include "common/status.h"
#include "http/server.h"

namespace gpuwatch::server {

struct AuthConfig {
  std::string admin_token;       // empty: no admin token; admin routes are refused
  std::string write_token;       // empty: none
  std::string admin_token_path;  // named in refusals, so an operator knows where to look
};

inline constexpr char kAdminTokenFile[] = "admin.token";
inline constexpr size_t kMinTokenChars = 16;

// Reads the token at `path`, or creates it (32 random bytes as hex, mode 0600, O_EXCL) when it
// does not exist. A token file readable by group or others is refused: it would not be secret.
Result<std::string> LoadOrCreateAdminToken(const std::string& path);
// Reads a token file made by the operator: one line, at least 16 characters, not readable by
// group or others.
Result<std::string> ReadTokenFile(const std::string& path);

// The http::Server authorizer for `config`.
http::Authorizer MakeAuthorizer(AuthConfig config);

// Whether `host` (a --listen host) binds loopback only: 127.0.0.0/8, ::1 or "localhost".
bool IsLoopbackHost(const std::string& host);

}  // namespace gpuwatch::server
