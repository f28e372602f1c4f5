// libFuzzer target for gpuwatch explain: any bytes as one file, or split into two files, go
// through every parser and the diagnosis engine; nothing may crash, hang or read out of
// bounds, and the document must serialise.
//
// Build: scripts/fuzz.sh (clang, libFuzzer); CTest runs it through tests/fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <string>

#include "explain/explain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::explain;
  const std::string in(reinterpret_cast<const char*>(data), size);
  (void)Explain({{"a.log", in}}, "")
      .document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const size_t half = size / 2;
  const Explanation two = Explain({{"a.log", in.substr(0, half)}, {"b.txt", in.substr(half)}}, "n");
  (void)RenderExplanation(two);
  return 0;
}
