#include "server/http_cache.h"

#include <fmt/format.h>

#include <cstdint>

#include "common/strings.h"

namespace gpuwatch::server {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string_view Opaque(std::string_view tag) {
  if (tag.substr(0, 2) == "W/") tag.remove_prefix(2);
  return tag;
}

}  // namespace

std::string AssetEtag(std::string_view body) {
  return fmt::format("\"{:x}-{:016x}\"", body.size(), Fnv1a64(body));
}

bool EtagMatches(std::string_view if_none_match, std::string_view etag) {
  const std::string_view want = Opaque(etag);
  while (!if_none_match.empty()) {
    const size_t comma = if_none_match.find(',');
    const std::string_view item = Trim(if_none_match.substr(0, comma));
    if (item == "*" || (!item.empty() && Opaque(item) == want)) return true;
    if (comma == std::string_view::npos) break;
    if_none_match.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace gpuwatch::server
