// Small sysfs helpers shared by the host collector and the topology probe. Internal to
// src/collect. Thread-safe (no state).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuwatch::collect::internal {

// strerror text for an errno value.
std::string ErrnoText(int err);
// Entries of `path` except . and .., sorted; false with *err = errno when it cannot be opened.
bool ListDir(const std::string& path, std::vector<std::string>* names, int* err);
// An InfiniBand port's rate file: "400 Gb/sec (4X NDR)" → 400, "2.5 Gb/sec (1X SDR)" → 2.5;
// nullopt when not that shape.
std::optional<double> ParseIbRateGbps(std::string_view text);
// An InfiniBand port's state file: "4: ACTIVE" → "ACTIVE"; without a "N:" prefix, trimmed.
std::string ParseIbPortState(std::string_view text);

}  // namespace gpuwatch::collect::internal
