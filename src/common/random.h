// Unpredictable bytes from the kernel (getrandom(2)), for tokens and identifiers a client must
// not be able to guess. Thread-safe.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace gpuwatch {

// `bytes` random bytes as 2×bytes lowercase hex digits. Fails only if the kernel's random
// source is unavailable.
Result<std::string> RandomHex(size_t bytes);

}  // namespace gpuwatch
