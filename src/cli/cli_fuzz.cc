// libFuzzer target for what `gpuwatch up` parses from its user: the config file, durations and
// the listen address. None may crash or hang on any bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/config_file.h"
#include "server/listen_address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)gpuwatch::cli::ParseConfig(in, "fuzz.conf");
  (void)gpuwatch::cli::ParseDurationMs(in);
  (void)gpuwatch::server::ParseListenAddress(in);
  return 0;
}
