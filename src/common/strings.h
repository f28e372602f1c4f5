// Small string helpers for parsers of procfs, sysfs and vendor text. Pure functions.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuwatch {

std::string_view TrimWhitespace(std::string_view s);
// Splits on any of `delims`; empty fields are dropped when `skip_empty`.
std::vector<std::string_view> SplitAny(std::string_view s, std::string_view delims,
                                       bool skip_empty = true);
bool StartsWith(std::string_view s, std::string_view prefix);
std::string ToLower(std::string_view s);
// ASCII letters compared without case (HTTP header names, PromQL keywords, sacct's fields).
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
// FNV-1a, 64 bits: stable across builds and platforms (std::hash is not); not cryptographic,
// it only tells two texts apart (configurations, embedded pages).
uint64_t Fnv1a64(std::string_view data);

// Whole-string integer parse (after trimming); nullopt on any stray character or overflow.
template <typename T>
std::optional<T> ParseInt(std::string_view s, int base = 10) {
  s = TrimWhitespace(s);
  if (s.empty()) return std::nullopt;
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> ParseDouble(std::string_view s);

// Replaces each invalid UTF-8 sequence with U+FFFD. Text a monitored process controls (its
// comm, its environment) reaches label values and JSON, which must be valid UTF-8.
std::string SanitizeUtf8(std::string_view s);
// SanitizeUtf8, then control characters (< 0x20, 0x7f) as '?': for printing to a terminal.
std::string PrintableText(std::string_view s);

// Reads a whole small file (procfs/sysfs style). NotFound / PermissionDenied / IoError.
struct FileReadResult {
  bool ok = false;
  int err = 0;  // errno when !ok
  std::string data;
};
FileReadResult ReadSmallFile(const std::string& path, size_t max_bytes = 1 << 20);

}  // namespace gpuwatch
