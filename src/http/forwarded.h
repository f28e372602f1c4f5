// Who a request really comes from when it passes through a reverse proxy (issue 19: the hub
// behind nginx that terminates TLS, docs/deploy.md).
//
// Behind a proxy every request's TCP peer is the proxy. The server's per-address guards — the
// brute-force limit on wrong tokens (server/auth.h) and the series bound per sender
// (server/remote_write_handler.h) — then see one address for everybody: one client guessing
// tokens blocks every agent, and the whole fleet shares one sender's series. So the operator
// names the proxies it trusts (`--trusted-proxy CIDR`), and for a request whose peer is one of
// them the client is read from X-Forwarded-For, the way nginx's realip module does with
// real_ip_recursive on: walk the list from the right (each proxy appends the address it got
// the request from), skip the hops that are trusted proxies, and take the first one that is
// not. A client can write anything at the left of that header, so nothing left of the first
// untrusted hop is believed; a peer that is not a trusted proxy is never asked. An entry that is
// not an address ends the walk at the last hop believed (the proxy that wrote it).
//
// Thread-safety: pure functions over immutable values.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpuwatch::http {

// An IPv4 or IPv6 network: "10.0.0.0/8", "fd00::/8", or one address ("127.0.0.1", "::1").
struct AddressBlock {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};  // IPv4: the first 4
  int prefix_bits = 0;
  bool operator==(const AddressBlock&) const = default;
};

// Parses a block; the error names the text and what is wrong. Bits set past the prefix
// ("10.0.0.1/8") are refused: the operator meant another network or another prefix.
Result<AddressBlock> ParseAddressBlock(std::string_view text);

// Whether `address` (as the server prints a peer: dotted IPv4, or IPv6 text; an IPv4-mapped
// IPv6 address counts as its IPv4 one) is inside any of `blocks`. False for text that is no
// address.
bool InAnyBlock(std::span<const AddressBlock> blocks, std::string_view address);

// The request's client: `peer` itself unless it is a trusted proxy; else the first hop of
// `x_forwarded_for` (every X-Forwarded-For field of the request, joined with commas in order)
// from the right that is not a trusted proxy, printed as the server prints a peer. Entries may
// carry a port ("192.0.2.7:51234", "[2001:db8::1]:443") or quotes, which are dropped.
std::string ForwardedClient(std::string_view peer, std::string_view x_forwarded_for,
                            std::span<const AddressBlock> trusted);

}  // namespace gpuwatch::http
