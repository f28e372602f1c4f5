// libFuzzer target for the block file reader and the salvage scan: a block on disk may be
// damaged in any way (a bad disk, a truncated copy, another program's file in blocks/), and
// opening the store must then salvage and quarantine it or skip the damaged chunk, never crash
// or allocate without bound.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "store/block.h"
#include "store/chunkenc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    char tmpl[] = "/tmp/gw_block_fuzz_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd >= 0) ::close(fd);
    return std::string(tmpl);
  }();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)gpuwatch::store::ScanBlock(bytes, [](const gpuwatch::store::SalvagedSeries& s) {
    for (const auto& [m, chunk] : s.chunks)
      if (m.length != chunk.size()) __builtin_trap();
    return gpuwatch::Status::Ok();
  });
  auto block = gpuwatch::store::Block::Open(path);
  if (!block.ok()) return 0;
  const auto& b = **block;
  for (uint32_t i = 0; i < b.num_series(); ++i) {
    for (const auto& m : b.chunks(i)) {
      auto bytes = b.ReadChunk(m);
      if (!bytes.ok()) continue;
      (void)gpuwatch::store::DecodeChunk(*bytes);
    }
  }
  return 0;
}
