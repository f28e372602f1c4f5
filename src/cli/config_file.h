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

}  // namespace gpuwatch::cli
