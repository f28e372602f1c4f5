#include "cli/config_file.h"

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
  }
  auto v = ParseDouble(num);
  if (!v || *v <= 0 || *v * scale > 86400000.0 * 7)
    return Status::InvalidArgument("bad duration '" + std::string(s) +
                                   "': expected e.g. 500ms, 1s, 2m");
  long long ms = static_cast<long long>(*v * scale + 0.5);
  if (ms < 10) return Status::InvalidArgument("duration '" + std::string(s) + "' is below 10ms");
  return ms;
}

}  // namespace gpuwatch::cli
