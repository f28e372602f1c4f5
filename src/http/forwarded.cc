#include "http/forwarded.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>

namespace gpuwatch::http {
namespace {

struct Address {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};
};

// Dotted IPv4 or IPv6 text; an IPv4-mapped IPv6 address becomes its IPv4 one (the server
// prints a peer that way: one client, one address).
std::optional<Address> ParseAddress(std::string_view text) {
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  char buf[INET6_ADDRSTRLEN] = {};
  std::memcpy(buf, text.data(), text.size());
  Address a;
  if (::inet_pton(AF_INET, buf, a.bytes.data()) == 1) return a;
  in6_addr a6{};
  if (::inet_pton(AF_INET6, buf, &a6) != 1) return std::nullopt;
  if (IN6_IS_ADDR_V4MAPPED(&a6)) {
    std::memcpy(a.bytes.data(), a6.s6_addr + 12, 4);
    return a;
  }
  a.v6 = true;
  std::memcpy(a.bytes.data(), a6.s6_addr, 16);
  return a;
}

std::string Print(const Address& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(a.v6 ? AF_INET6 : AF_INET, a.bytes.data(), buf, sizeof(buf));
  return buf;
}

bool Inside(const AddressBlock& b, const Address& a) {
  if (b.v6 != a.v6) return false;
  int bits = b.prefix_bits;
  for (size_t i = 0; bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a.bytes[i] & mask) != (b.bytes[i] & mask)) return false;
  }
  return true;
}

bool InAny(std::span<const AddressBlock> blocks, const Address& a) {
  for (const AddressBlock& b : blocks)
    if (Inside(b, a)) return true;
  return false;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '"'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '"')) s.remove_suffix(1);
  return s;
}

// One X-Forwarded-For entry as an address: "[v6]:port" and "v4:port" lose the port.
std::optional<Address> HopAddress(std::string_view hop) {
  hop = Trim(hop);
  if (hop.starts_with('[')) {
    const size_t close = hop.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    return ParseAddress(hop.substr(1, close - 1));
  }
  if (const size_t colon = hop.find(':');
      colon != std::string_view::npos && hop.find(':', colon + 1) == std::string_view::npos)
    hop = hop.substr(0, colon);  // one colon: IPv4 with a port (IPv6 has two or more)
  return ParseAddress(hop);
}

}  // namespace

Result<AddressBlock> ParseAddressBlock(std::string_view text) {
  const std::string shown(text);
  const size_t slash = text.find('/');
  auto address = ParseAddress(text.substr(0, slash));
  if (!address)
    return Status::InvalidArgument("'" + shown + "' is not an IP address or a network (CIDR)");
  AddressBlock b;
  b.v6 = address->v6;
  b.bytes = address->bytes;
  const int max_bits = b.v6 ? 128 : 32;
  b.prefix_bits = max_bits;
  if (slash != std::string_view::npos) {
    const std::string_view bits = text.substr(slash + 1);
    int v = -1;
    const auto r = std::from_chars(bits.data(), bits.data() + bits.size(), v);
    if (bits.empty() || r.ec != std::errc() || r.ptr != bits.data() + bits.size() || v < 0 ||
        v > max_bits)
      return Status::InvalidArgument("'" + shown + "': the prefix length must be 0 to " +
                                     std::to_string(max_bits));
    b.prefix_bits = v;
  }
  // Bits past the prefix: "10.0.0.1/8" is 10.0.0.0/8 or 10.0.0.1/32, not for us to guess.
  AddressBlock masked = b;
  for (int i = 0; i < 16; ++i) {
    const int keep = std::clamp(b.prefix_bits - 8 * i, 0, 8);
    masked.bytes[i] &= keep == 0 ? 0 : static_cast<uint8_t>(0xff << (8 - keep));
  }
  if (masked.bytes != b.bytes)
    return Status::InvalidArgument("'" + shown + "' has address bits set past its /" +
                                   std::to_string(b.prefix_bits) + " prefix");
  return b;
}

bool InAnyBlock(std::span<const AddressBlock> blocks, std::string_view address) {
  const auto a = ParseAddress(address);
  return a && InAny(blocks, *a);
}

std::string ForwardedClient(std::string_view peer, std::string_view x_forwarded_for,
                            std::span<const AddressBlock> trusted) {
  std::string client(peer);
  if (trusted.empty() || x_forwarded_for.empty() || !InAnyBlock(trusted, peer)) return client;
  // From the right: each trusted proxy appended the address it was reached from.
  std::string_view rest = x_forwarded_for;
  while (!rest.empty()) {
    const size_t comma = rest.rfind(',');
    const std::string_view hop = comma == std::string_view::npos ? rest : rest.substr(comma + 1);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(0, comma);
    if (Trim(hop).empty()) continue;
    const auto a = HopAddress(hop);
    if (!a) return client;  // the last hop believed
    client = Print(*a);
    if (!InAny(trusted, *a)) return client;
  }
  return client;  // every hop a trusted proxy: the leftmost
}

}  // namespace gpuwatch::http
