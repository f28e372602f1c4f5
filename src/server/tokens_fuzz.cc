// libFuzzer target for the tokens file (--tokens FILE, server/tokens.h): no input may crash the
// parser; every rejection says why and never quotes the first field (a token); what it accepts
// holds tokens of at least 128 bits, unique, each found again by Find, with valid roles.
//
// CTest runs it through tests/fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/tokens.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::server;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = ParseTokens(text, "fuzz");
  if (!t.ok()) {
    if (t.status().message().empty()) std::abort();
    return 0;
  }
  for (const TokenEntry& e : t->entries) {
    if (TokenBits(e.token) < kMinTokenBits || e.token.size() > kMaxTokenChars) std::abort();
    if (t->Find(e.token) != &e) std::abort();  // unique: the first match is this entry
    if (e.role != Role::kRead && e.role != Role::kWrite && e.role != Role::kAdmin) std::abort();
    if (e.principal.find(e.token) != std::string::npos) std::abort();
    for (const auto& p : e.projects)
      if (p.empty()) std::abort();
  }
  return 0;
}
