// Fuzz target for the chunk codec. The input is either
//   a chunk (first byte < 0x80, i.e. every real chunk: its encoding byte is 1): decoded with and
//     without checksum verification; whatever decodes must be strictly increasing in time and
//     survive decode -> encode -> decode unchanged, and re-encoding must be deterministic; or
//   a sample recipe (first byte >= 0x80): byte 1 picks the block size, then 16-byte records
//     (timestamp increment, value bits) build a series that must round-trip bit for bit.
// Built with libFuzzer by hand (see scripts/fuzz.sh) and, with tests/fuzz_driver.cc, in CTest.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "store/chunkenc.h"

namespace {

using gpuwatch::store::ChunkEncoder;
using gpuwatch::store::DecodeChunk;
using gpuwatch::store::Sample;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool SameBits(const std::vector<Sample>& a, const std::vector<Sample>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].t_ms != b[i].t_ms || std::memcmp(&a[i].value, &b[i].value, 8) != 0) return false;
  }
  return true;
}

std::string Encode(const std::vector<Sample>& samples, int block_shift) {
  ChunkEncoder enc(block_shift);
  for (const Sample& s : samples) Check(enc.Append(s.t_ms, s.value).ok());
  return enc.Finish();
}

void FuzzDecode(std::string_view bytes) {
  for (bool verify : {true, false}) {
    auto decoded = DecodeChunk(bytes, {.verify_checksum = verify});
    if (!decoded.ok()) continue;
    for (size_t i = 1; i < decoded->size(); ++i) Check((*decoded)[i - 1].t_ms < (*decoded)[i].t_ms);
    const std::string again = Encode(*decoded, gpuwatch::store::kDefaultBlockShift);
    auto redecoded = DecodeChunk(again);
    Check(redecoded.ok() && SameBits(*decoded, *redecoded));
    Check(Encode(*redecoded, gpuwatch::store::kDefaultBlockShift) == again);
  }
}

void FuzzEncode(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const int block_shift = gpuwatch::store::kMinBlockShift + data[1] % 11;
  std::vector<Sample> samples;
  int64_t t = 0;
  for (size_t off = 2; off + 16 <= size && samples.size() < gpuwatch::store::kMaxChunkSamples;
       off += 16) {
    uint64_t step, bits;
    std::memcpy(&step, data + off, 8);
    std::memcpy(&bits, data + off + 8, 8);
    // Small steps mostly, like scrapes; any step the int64 range still allows.
    step = (step & 0xff) == 0 ? step : 1 + (step >> 56);
    if (!samples.empty()) {
      const uint64_t room = static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(t);
      if (step == 0 || step > room) break;
      t = static_cast<int64_t>(static_cast<uint64_t>(t) + step);
    } else {
      t = static_cast<int64_t>(step);
    }
    double v;
    std::memcpy(&v, &bits, 8);
    samples.push_back({t, v});
  }
  const std::string chunk = Encode(samples, block_shift);
  auto decoded = DecodeChunk(chunk);
  Check(decoded.ok() && SameBits(samples, *decoded));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] >= 0x80) {
    FuzzEncode(data, size);
  } else {
    FuzzDecode(std::string_view(reinterpret_cast<const char*>(data), size));
  }
  return 0;
}
