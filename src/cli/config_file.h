// The agent's config file: `key = value` lines whose keys are the long flag names of
// `gpuwatch up` (listen, data-dir, nvml-lib, gpu-interval, …); `#` starts a comment; values
// may be quoted. Flags on the command line override the file. Pure parser; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpuwatch::cli {

Result<std::map<std::string, std::string>> ParseConfig(std::string_view text,
                                                       std::string_view source_name);

// "1s", "500ms", "2m", "1.5s", or a bare number of seconds.
Result<long long> ParseDurationMs(std::string_view s);

// A retention period: a positive number with a unit h, d, w or y ("7d", "36h", "1y").
Result<long long> ParseRetentionMs(std::string_view s);

// A size: a number with an optional unit B, KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB
// (powers of 1024); "5GiB", "500MB", "1048576".
Result<unsigned long long> ParseByteSize(std::string_view s);

}  // namespace gpuwatch::cli
