// libFuzzer target for X-Forwarded-For and --trusted-proxy parsing (http/forwarded.h): the
// first line is a block to parse, the rest an X-Forwarded-For value from a trusted peer. No
// input may crash it; a parsed block's prefix fits its family; the client named is the peer
// or an address the server could print (never text copied from the header as it came).
//
// CTest runs it through tests/fuzz_driver.cc over tests/fixtures/forwarded.
#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "http/forwarded.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::http;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  const std::string_view first = in.substr(0, nl);
  const std::string_view header = nl == std::string_view::npos ? "" : in.substr(nl + 1);
  std::vector<AddressBlock> trusted;
  if (auto b = ParseAddressBlock(first); b.ok()) {
    if (b->prefix_bits < 0 || b->prefix_bits > (b->v6 ? 128 : 32)) std::abort();
    trusted.push_back(*b);
  }
  trusted.push_back(*ParseAddressBlock("127.0.0.0/8"));
  const std::string client = ForwardedClient("127.0.0.1", header, trusted);
  if (client != "127.0.0.1") {
    unsigned char buf[16];
    if (::inet_pton(AF_INET, client.c_str(), buf) != 1 &&
        ::inet_pton(AF_INET6, client.c_str(), buf) != 1)
      std::abort();
  }
  return 0;
}
