// X-Forwarded-For as nginx writes it: $proxy_add_x_forwarded_for appends $remote_addr (the
// address nginx was reached from) to what the client sent, comma and space separated
// (nginx.org ngx_http_proxy_module, "$proxy_add_x_forwarded_for"); the realip module with
// real_ip_recursive on takes the last address that is not a trusted proxy
// (nginx.org ngx_http_realip_module, "real_ip_recursive").
#include "http/forwarded.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpuwatch::http {
namespace {

std::vector<AddressBlock> Blocks(std::initializer_list<const char*> texts) {
  std::vector<AddressBlock> out;
  for (const char* t : texts) {
    auto b = ParseAddressBlock(t);
    EXPECT_TRUE(b.ok()) << t << ": " << b.status().ToString();
    if (b.ok()) out.push_back(*b);
  }
  return out;
}

TEST(AddressBlock, ParsesNetworksAndSingleAddresses) {
  auto b = ParseAddressBlock("10.0.0.0/8");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->v6);
  EXPECT_EQ(b->prefix_bits, 8);
  EXPECT_EQ(ParseAddressBlock("127.0.0.1")->prefix_bits, 32);
  EXPECT_EQ(ParseAddressBlock("::1")->prefix_bits, 128);
  EXPECT_TRUE(ParseAddressBlock("fd00::/8")->v6);
  EXPECT_EQ(ParseAddressBlock("0.0.0.0/0")->prefix_bits, 0);
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"10.0.0.1/8", "bits set past its /8 prefix"},
      {"10.0.0.0/33", "prefix length must be 0 to 32"},
      {"fd00::/129", "prefix length must be 0 to 128"},
      {"10.0.0.0/", "prefix length"},
      {"10.0.0.0/8x", "prefix length"},
      {"proxy.example.org", "not an IP address"},
      {"", "not an IP address"},
      {"10.0.0", "not an IP address"},
  };
  for (const auto& [text, why] : bad) {
    auto r = ParseAddressBlock(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  }
}

TEST(AddressBlock, MembershipByPrefixAndFamily) {
  const auto blocks = Blocks({"10.1.0.0/16", "192.0.2.7", "2001:db8:1::/48"});
  EXPECT_TRUE(InAnyBlock(blocks, "10.1.255.3"));
  EXPECT_FALSE(InAnyBlock(blocks, "10.2.0.1"));
  EXPECT_TRUE(InAnyBlock(blocks, "192.0.2.7"));
  EXPECT_FALSE(InAnyBlock(blocks, "192.0.2.8"));
  EXPECT_TRUE(InAnyBlock(blocks, "2001:db8:1:ffff::9"));
  EXPECT_FALSE(InAnyBlock(blocks, "2001:db8:2::9"));
  EXPECT_TRUE(InAnyBlock(blocks, "::ffff:10.1.0.9"));  // IPv4-mapped: its IPv4 address
  EXPECT_FALSE(InAnyBlock(blocks, "not-an-address"));
  EXPECT_FALSE(InAnyBlock({}, "10.1.0.1"));
  // A /20 boundary inside a byte.
  const auto b20 = Blocks({"172.16.16.0/20"});
  EXPECT_TRUE(InAnyBlock(b20, "172.16.31.255"));
  EXPECT_FALSE(InAnyBlock(b20, "172.16.32.0"));
  EXPECT_FALSE(InAnyBlock(b20, "172.16.15.255"));
}

TEST(ForwardedClient, OnlyATrustedPeerIsAskedAndOnlyFromTheRight) {
  const auto trusted = Blocks({"127.0.0.1", "10.0.0.0/8"});
  // One nginx on the hub's host: the client it was reached from.
  EXPECT_EQ(ForwardedClient("127.0.0.1", "198.51.100.23", trusted), "198.51.100.23");
  // A client that writes its own X-Forwarded-For to pose as another: nginx appends the real
  // one, and nothing left of the first untrusted hop is believed.
  EXPECT_EQ(ForwardedClient("127.0.0.1", "203.0.113.9, 198.51.100.23", trusted), "198.51.100.23");
  // Two proxies (a load balancer in 10/8, then nginx): skipped from the right.
  EXPECT_EQ(ForwardedClient("127.0.0.1", "198.51.100.23, 10.0.3.4", trusted), "198.51.100.23");
  // A peer that is no trusted proxy is its own client, whatever it says.
  EXPECT_EQ(ForwardedClient("198.51.100.23", "127.0.0.1", trusted), "198.51.100.23");
  // No header, or nobody trusted: the peer.
  EXPECT_EQ(ForwardedClient("127.0.0.1", "", trusted), "127.0.0.1");
  EXPECT_EQ(ForwardedClient("127.0.0.1", "198.51.100.23", {}), "127.0.0.1");
  // Every hop a trusted proxy: the leftmost.
  EXPECT_EQ(ForwardedClient("127.0.0.1", "10.9.9.9, 10.0.3.4", trusted), "10.9.9.9");
  // Ports, brackets, quotes and empty entries.
  EXPECT_EQ(ForwardedClient("127.0.0.1", "198.51.100.23:51234", trusted), "198.51.100.23");
  EXPECT_EQ(ForwardedClient("127.0.0.1", "\"[2001:db8::7]:443\"", trusted), "2001:db8::7");
  EXPECT_EQ(ForwardedClient("127.0.0.1", "2001:db8::7", trusted), "2001:db8::7");
  EXPECT_EQ(ForwardedClient("127.0.0.1", "198.51.100.23, ,", trusted), "198.51.100.23");
  // An entry that is no address ends the walk at the last hop believed.
  EXPECT_EQ(ForwardedClient("127.0.0.1", "198.51.100.23, unknown", trusted), "127.0.0.1");
  EXPECT_EQ(ForwardedClient("127.0.0.1", "unknown, 10.0.3.4", trusted), "10.0.3.4");
  // IPv4-mapped forms are printed as IPv4, as the server prints peers.
  EXPECT_EQ(ForwardedClient("127.0.0.1", "::ffff:198.51.100.23", trusted), "198.51.100.23");
}

}  // namespace
}  // namespace gpuwatch::http
