#include "topo/topology.h"

#include <charconv>

namespace gpuwatch::topo {

namespace {

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

LinkLevel ClassifyLink(std::string_view entry) {
  if (entry == "X") return LinkLevel::kSelf;
  if (entry.size() > 2 && entry.substr(0, 2) == "NV" && AllDigits(entry.substr(2)))
    return LinkLevel::kNvlink;
  if (entry == "PIX") return LinkLevel::kPix;
  if (entry == "PXB") return LinkLevel::kPxb;
  if (entry == "PHB") return LinkLevel::kPhb;
  if (entry == "NODE") return LinkLevel::kNode;
  if (entry == "SYS" || entry == "SOC") return LinkLevel::kSys;
  return LinkLevel::kUnknown;
}

std::string_view LinkLevelName(LinkLevel level) {
  switch (level) {
    case LinkLevel::kSelf:
      return "X";
    case LinkLevel::kNvlink:
      return "NV#";
    case LinkLevel::kPix:
      return "PIX";
    case LinkLevel::kPxb:
      return "PXB";
    case LinkLevel::kPhb:
      return "PHB";
    case LinkLevel::kNode:
      return "NODE";
    case LinkLevel::kSys:
      return "SYS";
    case LinkLevel::kUnknown:
      break;
  }
  return "unknown";
}

int LinkRank(std::string_view entry) { return static_cast<int>(ClassifyLink(entry)); }

int NvlinkCount(std::string_view entry) {
  if (ClassifyLink(entry) != LinkLevel::kNvlink) return 0;
  int n = 0;
  const std::string_view digits = entry.substr(2);
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || p != digits.data() + digits.size()) return 0;
  return n;
}

int CompareLinks(std::string_view a, std::string_view b) {
  const int ra = LinkRank(a), rb = LinkRank(b);
  if (ra != rb) return ra < rb ? -1 : 1;
  if (ra == static_cast<int>(LinkLevel::kNvlink)) {
    const int na = NvlinkCount(a), nb = NvlinkCount(b);
    if (na != nb) return na > nb ? -1 : 1;
  }
  return 0;
}

}  // namespace gpuwatch::topo
