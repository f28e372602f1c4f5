// libFuzzer target for the remote-write decoders: bodies arrive from the network.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "store/remote_write.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  gpuwatch::store::RemoteWriteLimits limits;
  limits.max_uncompressed_bytes = 1 << 20;
  (void)gpuwatch::store::DecodeRemoteWrite(in, limits);
  (void)gpuwatch::store::DecodeWriteRequest(in, limits);
  return 0;
}
