#include "cli/config_file.h"

#include <cctype>
#include <optional>
#include <utility>

#include "common/strings.h"

namespace gpuwatch::cli {

Result<std::map<std::string, std::string>> ParseConfig(std::string_view text,
                                                       std::string_view source_name) {
  std::map<std::string, std::string> out;
  int line_no = 0;
  for (auto line : SplitAny(text, "\n", false)) {
    ++line_no;
    auto hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    line = TrimWhitespace(line);
    if (line.empty()) continue;
    auto eq = line.find('=');
    auto where = [&] { return std::string(source_name) + ":" + std::to_string(line_no) + ": "; };
    if (eq == std::string_view::npos)
      return Status::InvalidArgument(where() + "expected 'key = value'");
    auto key = TrimWhitespace(line.substr(0, eq));
    auto value = TrimWhitespace(line.substr(eq + 1));
    if (key.empty()) return Status::InvalidArgument(where() + "empty key");
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front())
      value = value.substr(1, value.size() - 2);
    if (!out.emplace(std::string(key), std::string(value)).second)
      return Status::InvalidArgument(where() + "key '" + std::string(key) + "' given twice");
  }
  return out;
}

Result<long long> ParseDurationMs(std::string_view s) {
  s = TrimWhitespace(s);
  double scale = 1000.0;
  std::string_view num = s;
  if (s.size() > 2 && s.substr(s.size() - 2) == "ms") {
    scale = 1.0;
    num = s.substr(0, s.size() - 2);
  } else if (!s.empty() && s.back() == 's') {
    num = s.substr(0, s.size() - 1);
  } else if (!s.empty() && s.back() == 'm') {
    scale = 60000.0;
    num = s.substr(0, s.size() - 1);
  } else if (!s.empty() && s.back() == 'h') {
    scale = 3600000.0;
    num = s.substr(0, s.size() - 1);
  }
  auto v = ParseDouble(num);
  if (!v || *v <= 0 || *v * scale > 86400000.0 * 7)
    return Status::InvalidArgument("bad duration '" + std::string(s) +
                                   "': expected e.g. 500ms, 1s, 2m, 1h");
  long long ms = static_cast<long long>(*v * scale + 0.5);
  if (ms < 10) return Status::InvalidArgument("duration '" + std::string(s) + "' is below 10ms");
  return ms;
}

namespace {
// Splits "12.5GiB" into 12.5 and "GiB".
std::pair<std::optional<double>, std::string_view> NumberAndUnit(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  return {ParseDouble(s.substr(0, i)), TrimWhitespace(s.substr(i))};
}
}  // namespace

Result<long long> ParseRetentionMs(std::string_view s) {
  s = TrimWhitespace(s);
  auto [v, unit] = NumberAndUnit(s);
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"h", 3600e3}, {"d", 86400e3}, {"w", 7 * 86400e3}, {"y", 365 * 86400e3}};
  for (const auto& [u, scale] : kUnits) {
    if (unit != u) continue;
    if (!v || *v <= 0 || *v * scale > 100 * 365 * 86400e3) break;
    return static_cast<long long>(*v * scale + 0.5);
  }
  return Status::InvalidArgument("bad retention '" + std::string(s) +
                                 "': expected a number with h, d, w or y, e.g. 7d");
}

Result<unsigned long long> ParseByteSize(std::string_view s) {
  s = TrimWhitespace(s);
  auto [v, unit] = NumberAndUnit(s);
  static constexpr std::pair<std::string_view, double> kUnits[] = {{"", 1},
                                                                   {"B", 1},
                                                                   {"KB", 1e3},
                                                                   {"MB", 1e6},
                                                                   {"GB", 1e9},
                                                                   {"TB", 1e12},
                                                                   {"KiB", 1024.0},
                                                                   {"MiB", 1048576.0},
                                                                   {"GiB", 1073741824.0},
                                                                   {"TiB", 1099511627776.0}};
  for (const auto& [u, scale] : kUnits) {
    if (unit != u) continue;
    if (!v || *v <= 0 || *v * scale > 1e18) break;
    return static_cast<unsigned long long>(*v * scale + 0.5);
  }
  return Status::InvalidArgument("bad size '" + std::string(s) +
                                 "': expected e.g. 5GiB, 500MB or a number of bytes");
}

}  // namespace gpuwatch::cli
