#include "server/tokens.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "common/file_io.h"
#include "common/log.h"
#include "common/random.h"
#include "common/strings.h"
#include "common/time_base.h"
#include "server/query_api.h"

namespace gpuwatch::server {
namespace {

constexpr size_t kMaxTokensFileBytes = 4 << 20;
constexpr size_t kMaxProjectChars = 128;

// What errors and principals call the file: its base name.
std::string SourceName(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

Result<std::string> ReadTokensText(const std::string& path) {
  auto f = ReadSmallFile(path, kMaxTokensFileBytes);
  if (!f.ok) return Status::IoError("cannot read " + path + ": " + std::strerror(f.err));
  return std::move(f.data);
}

int64_t MtimeNs(const struct stat& sb) {
  return int64_t{sb.st_mtim.tv_sec} * 1'000'000'000 + sb.st_mtim.tv_nsec;
}

// Project names are compared as sent by the scheduler or the SDK; these characters cover
// Slurm accounts, Kubernetes namespaces and the SDK's project field, and exclude what would
// need quoting in a label matcher or a log line.
bool ValidProject(std::string_view p) {
  if (p.empty() || p.size() > kMaxProjectChars) return false;
  for (char c : p)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == '/' || c == ':' || c == '@'))
      return false;
  return true;
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

bool TokensEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::optional<Role> ParseRole(std::string_view s) {
  if (s == "read") return Role::kRead;
  if (s == "write") return Role::kWrite;
  if (s == "admin") return Role::kAdmin;
  return std::nullopt;
}

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kRead:
      return "read";
    case Role::kWrite:
      return "write";
    case Role::kAdmin:
      return "admin";
  }
  return "read";
}

const TokenEntry* TokenTable::Find(std::string_view token) const {
  // Every entry is compared, so the time taken does not say which line (if any) matched.
  const TokenEntry* found = nullptr;
  for (const TokenEntry& e : entries)
    if (TokensEqual(token, e.token) && !found) found = &e;
  return found;
}

double TokenBits(std::string_view token) {
  bool hex = true, b64 = true;
  for (char c : token) {
    const bool alnum = std::isalnum(static_cast<unsigned char>(c)) != 0;
    if (!std::isxdigit(static_cast<unsigned char>(c))) hex = false;
    // base64 (+ /) and base64url (- _), with '=' padding.
    if (!(alnum || c == '+' || c == '/' || c == '-' || c == '_' || c == '=')) b64 = false;
  }
  size_t chars = token.size();
  while (chars > 0 && token[chars - 1] == '=') --chars;  // padding carries no bits
  if (hex) return 4.0 * static_cast<double>(token.size());
  if (b64) return 6.0 * static_cast<double>(chars);
  return 0;
}

Status CheckSecretFile(const std::string& path) {
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

Result<TokenTable> ParseTokens(std::string_view text, const std::string& source) {
  TokenTable table;
  std::set<std::string_view> seen;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto fields = Fields(line);
    if (fields.empty()) continue;
    // Messages name the line, never the token: a log line must not hold a secret, even a
    // rejected one (it may be a real token with a typo elsewhere on the line).
    const std::string where = fmt::format("{}:{}", source, line_no);
    if (fields.size() < 2)
      return Status::InvalidArgument(where + ": expected TOKEN ROLE [PROJECT,...] [expires=WHEN]");
    TokenEntry e;
    e.line = line_no;
    if (fields[0].size() > kMaxTokenChars)
      return Status::InvalidArgument(
          fmt::format("{}: the token is longer than {} characters", where, kMaxTokenChars));
    if (TokenBits(fields[0]) < kMinTokenBits)
      return Status::InvalidArgument(
          where +
          ": the token holds less than 128 bits (at least 32 hex digits or 22 base64 "
          "characters; `gpuwatch token new` makes one)");
    e.token = std::string(fields[0]);
    if (!seen.insert(fields[0]).second)
      return Status::InvalidArgument(where + ": the same token is on an earlier line");
    auto role = ParseRole(fields[1]);
    if (!role)
      return Status::InvalidArgument(where + ": unknown role \"" +
                                     std::string(fields[1].substr(0, 32)) +
                                     "\" (read, write or admin)");
    e.role = *role;
    for (size_t i = 2; i < fields.size(); ++i) {
      const std::string_view f = fields[i];
      if (f.starts_with("expires=")) {
        if (e.expires_ms) return Status::InvalidArgument(where + ": expires= is given twice");
        auto t = ParseApiTimestampMs(f.substr(8));
        if (!t.ok())
          return Status::InvalidArgument(where + ": expires=: " + t.status().message() +
                                         " (RFC 3339 or Unix seconds)");
        e.expires_ms = *t;
        continue;
      }
      if (i != 2 || !e.projects.empty())
        return Status::InvalidArgument(
            where + ": unexpected field \"" + std::string(f.substr(0, 64)) +
            "\" (projects are one comma-separated field after the role)");
      for (std::string_view p : SplitAny(f, ",", false)) {
        if (!ValidProject(p))
          return Status::InvalidArgument(where + ": bad project name \"" +
                                         std::string(p.substr(0, 64)) +
                                         "\" (letters, digits and - _ . / : @, at most 128)");
        e.projects.emplace_back(p);
      }
    }
    e.principal = fmt::format("{}@{}:{}", RoleName(e.role), source, line_no);
    table.entries.push_back(std::move(e));
  }
  return table;
}

Result<TokenTable> LoadTokensFile(const std::string& path) {
  GW_RETURN_IF_ERROR(CheckSecretFile(path));
  auto text = ReadTokensText(path);
  if (!text.ok()) return text.status();
  return ParseTokens(*text, SourceName(path));
}

Result<std::string> NewTokenLine(Role role, const std::vector<std::string>& projects) {
  for (const std::string& p : projects)
    if (!ValidProject(p))
      return Status::InvalidArgument("bad project name \"" + p.substr(0, 64) +
                                     "\" (letters, digits and - _ . / : @, at most 128)");
  auto token = RandomHex(32);
  if (!token.ok()) return token.status();
  std::string line = *token + " " + std::string(RoleName(role));
  for (size_t i = 0; i < projects.size(); ++i) line += (i ? "," : " ") + projects[i];
  return line;
}

Result<std::shared_ptr<TokensFile>> TokensFile::Open(const std::string& path,
                                                     std::chrono::milliseconds recheck) {
  std::shared_ptr<TokensFile> f(new TokensFile(path, recheck));
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0)
    return Status::IoError("cannot stat " + path + ": " + std::strerror(errno));
  auto table = LoadTokensFile(path);
  if (!table.ok()) return table.status();
  f->table_ = std::make_shared<const TokenTable>(std::move(table).value());
  f->mtime_ns_ = MtimeNs(sb);
  f->size_ = sb.st_size;
  f->next_check_ = std::chrono::steady_clock::now() + recheck;
  return f;
}

std::shared_ptr<const TokenTable> TokensFile::Current() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return table_;
  next_check_ = now + recheck_;
  struct stat sb {};
  if (::stat(path_.c_str(), &sb) != 0) {
    // A file removed by mistake revokes nothing and grants nothing new: the table stays.
    const std::string err = "cannot stat " + path_ + ": " + std::strerror(errno);
    if (err != last_error_) GW_LOG_ERROR("tokens: {}; keeping the tokens read before", err);
    last_error_ = err;
    return table_;
  }
  const int64_t mtime_ns = MtimeNs(sb);
  if (mtime_ns == mtime_ns_ && sb.st_size == size_) return table_;
  auto table = LoadTokensFile(path_);
  if (!table.ok()) {
    const std::string err = table.status().message();
    if (err != last_error_) GW_LOG_ERROR("tokens: {}; keeping the tokens read before", err);
    last_error_ = err;
    return table_;
  }
  mtime_ns_ = mtime_ns;
  size_ = sb.st_size;
  last_error_.clear();
  table_ = std::make_shared<const TokenTable>(std::move(table).value());
  GW_LOG_INFO("tokens: re-read {}: {} tokens", path_, table_->entries.size());
  return table_;
}

std::string TokenId(std::string_view token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(token.data(), token.size(), digest, &len, EVP_sha256(), nullptr) != 1 || len < 8)
    return {};
  std::string out;
  for (unsigned i = 0; i < 8; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

nlohmann::json TokenEntryJson(const TokenEntry& e, int64_t now_ms) {
  nlohmann::json j = {{"id", TokenId(e.token)},
                      {"role", RoleName(e.role)},
                      {"projects", e.projects},
                      {"line", e.line},
                      {"principal", e.principal}};
  if (e.expires_ms) {
    j["expires"] = FormatUtc(*e.expires_ms);
    j["expired"] = *e.expires_ms <= now_ms;
  }
  return j;
}

Status TokensFile::Replace(const std::string& text) {
  // The same checks as a start: a change that would not load is not written.
  auto table = ParseTokens(text, SourceName(path_));
  if (!table.ok()) return table.status();
  GW_RETURN_IF_ERROR(WriteSecretFileAtomically(path_, text));
  struct stat sb {};
  std::lock_guard<std::mutex> lock(mu_);
  if (::stat(path_.c_str(), &sb) == 0) {
    mtime_ns_ = MtimeNs(sb);
    size_ = sb.st_size;
  }
  last_error_.clear();
  table_ = std::make_shared<const TokenTable>(std::move(table).value());
  return Status::Ok();
}

Result<TokenEntry> TokensFile::Add(Role role, const std::vector<std::string>& projects,
                                   std::optional<int64_t> expires_ms, const std::string& by) {
  auto line = NewTokenLine(role, projects);
  if (!line.ok()) return line.status();
  if (expires_ms) *line += " expires=" + FormatUtc(*expires_ms);
  std::lock_guard<std::mutex> write_lock(write_mu_);
  auto read = ReadTokensText(path_);
  if (!read.ok()) return read.status();
  std::string text = std::move(read).value();
  if (!text.empty() && text.back() != '\n') text += '\n';
  // Who added it and when, for the operator reading the file; never the asker's token.
  text += *line + "  # added by " + by + " at " + FormatUtc(WallClockMs()) + "\n";
  GW_RETURN_IF_ERROR(Replace(text));
  const std::string token = line->substr(0, line->find(' '));
  auto table = Current();
  if (const TokenEntry* e = table->Find(token)) return *e;
  return Status::Internal("the new token is not in " + path_ + " after writing it");
}

Result<TokenEntry> TokensFile::Revoke(std::string_view id) {
  std::lock_guard<std::mutex> write_lock(write_mu_);
  auto read = ReadTokensText(path_);
  if (!read.ok()) return read.status();
  const std::string& old_text = *read;
  auto table = ParseTokens(old_text, SourceName(path_));
  if (!table.ok()) return table.status();
  const TokenEntry* found = nullptr;
  for (const TokenEntry& e : table->entries)
    if (TokenId(e.token) == id) found = &e;
  if (!found) return Status::NotFound("no token with id " + std::string(id.substr(0, 64)));
  // Every other line as it was, comments included.
  std::string text;
  int line_no = 0;
  for (size_t pos = 0; pos < old_text.size();) {
    const size_t nl = old_text.find('\n', pos);
    const size_t end = nl == std::string::npos ? old_text.size() : nl + 1;
    if (++line_no != found->line) text.append(old_text, pos, end - pos);
    pos = end;
  }
  TokenEntry revoked = *found;
  GW_RETURN_IF_ERROR(Replace(text));
  return revoked;
}

}  // namespace gpuwatch::server
