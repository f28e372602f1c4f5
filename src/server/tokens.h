// The tokens file (issue 19, access control; docs/limits.md, "Tokens"): who may read, write or
// administer an agent or a hub, and which projects a token is confined to.
//
// One token a line: `TOKEN ROLE [PROJECT,...] [expires=WHEN]`, `#` starts a comment.
//   - TOKEN: at least 128 bits of randomness, judged by its alphabet: 32 hex digits, or 22
//     characters of base64/base64url (`gpuwatch token new` prints a line with 256 bits). A
//     short or guessable token is refused with its line number, never with its text.
//   - ROLE: `read` (every GET), `write` (sending data: remote-write, events; what agents use)
//     or `admin` (everything: silences, maintenance, snapshots, and reads).
//   - PROJECT,...: the token sees only these projects' jobs (server/scope.h). Absent: all.
//   - expires=WHEN (an extension of the form, which it keeps): RFC 3339 or Unix
//     seconds; the token is refused from then on, with a 401 that says it expired.
// The file must be readable by its owner only, as the admin token is. TokensFile re-reads it
// when it changes, so a token is added or revoked without a restart; a file that no longer
// parses keeps the previous table, and the error is logged once.
// Thread-safety: TokenTable is immutable; TokensFile is safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::server {

enum class Role { kRead, kWrite, kAdmin };
std::string_view RoleName(Role role);               // "read", "write", "admin"
std::optional<Role> ParseRole(std::string_view s);  // RoleName's inverse; nullopt for others

// Compares without an early exit, so the time taken says nothing about how much matched.
bool TokensEqual(std::string_view a, std::string_view b);

inline constexpr double kMinTokenBits = 128;
inline constexpr size_t kMaxTokenChars = 512;

struct TokenEntry {
  std::string token;
  Role role = Role::kRead;
  std::vector<std::string> projects;  // empty: every project
  std::optional<int64_t> expires_ms;  // Unix ms; absent: never
  int line = 0;                       // 1-based, for messages and the principal's name
  // Who the agent records as the author of what this token changed, and names in logs: the
  // role and the line ("admin@tokens:3"), never the token.
  std::string principal;
};

struct TokenTable {
  std::vector<TokenEntry> entries;
  // The entry whose token equals `token` (compared in constant time), or null.
  const TokenEntry* Find(std::string_view token) const;
};

// Bits of randomness a token of this length and alphabet can hold at most: 4 per character
// for hex, 6 for base64/base64url, 0 (refused) for anything else.
double TokenBits(std::string_view token);

// A file holding secrets must be a regular file readable by its owner only; the error says
// how to fix it.
Status CheckSecretFile(const std::string& path);

// Parses the file's text; `source` names it in errors ("tokens.txt"). Errors name the line.
Result<TokenTable> ParseTokens(std::string_view text, const std::string& source);
// Reads and parses `path`; refuses a file readable by group or others.
Result<TokenTable> LoadTokensFile(const std::string& path);

// One line for a tokens file with a new random token (32 bytes as hex).
Result<std::string> NewTokenLine(Role role, const std::vector<std::string>& projects);

// A token's public name: the first 16 hex digits of its SHA-256. Lists and revocations use it,
// so the token itself is never shown again once made, and the name says nothing of it.
std::string TokenId(std::string_view token);

// A token entry as the admin API lists it: id, role, projects, expires, line; never the token.
nlohmann::json TokenEntryJson(const TokenEntry& e, int64_t now_ms);

// A tokens file, re-read when its modification time or size changes (checked at most once per
// `recheck`).
class TokensFile {
 public:
  // Loads `path` now: an error here is a start-up error.
  static Result<std::shared_ptr<TokensFile>> Open(
      const std::string& path, std::chrono::milliseconds recheck = std::chrono::seconds(2));

  std::shared_ptr<const TokenTable> Current();
  const std::string& path() const { return path_; }

  // The admin API's changes (issue 19: admin tokens manage tokens). Each reads the file as it
  // is now (an operator's edits are kept), changes one line, writes it back atomically (mode
  // 0600: a temporary file, fsync, rename) and takes the new table at once. `by` is the
  // principal who asked, written in a comment beside an added line.
  // Adds a line with a new random token; the entry (with its token, which the caller shows
  // once) or InvalidArgument naming the project that is not valid.
  Result<TokenEntry> Add(Role role, const std::vector<std::string>& projects,
                         std::optional<int64_t> expires_ms, const std::string& by);
  // Removes the line of the token named `id` (TokenId); NotFound when none has it.
  Result<TokenEntry> Revoke(std::string_view id);

 private:
  TokensFile(std::string path, std::chrono::milliseconds recheck)
      : path_(std::move(path)), recheck_(recheck) {}
  // Writes `text` as the file and makes it the table. REQUIRES: write_mu_ held.
  Status Replace(const std::string& text);
  std::string path_;
  std::chrono::milliseconds recheck_;
  std::mutex write_mu_;  // one change of the file at a time (taken before mu_)
  std::mutex mu_;
  std::shared_ptr<const TokenTable> table_;
  std::chrono::steady_clock::time_point next_check_{};
  int64_t mtime_ns_ = 0;
  int64_t size_ = -1;
  std::string last_error_;  // logged once per distinct error
};

}  // namespace gpuwatch::server
