#include "collect/internal/sysfs.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "common/strings.h"

namespace gpuwatch::collect::internal {

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

bool ListDir(const std::string& path, std::vector<std::string>* names, int* err) {
  names->clear();
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    *err = errno;
    return false;
  }
  while (const dirent* e = ::readdir(dir)) {
    std::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    names->emplace_back(name);
  }
  ::closedir(dir);
  std::sort(names->begin(), names->end());
  return true;
}

std::optional<double> ParseIbRateGbps(std::string_view text) {
  std::vector<std::string_view> words = SplitAny(text, " \t\n");
  if (words.size() < 2 || !StartsWith(words[1], "Gb/s")) return std::nullopt;
  return ParseDouble(words[0]);
}

std::string ParseIbPortState(std::string_view text) {
  std::string_view s = TrimWhitespace(text);
  const size_t colon = s.find(':');
  if (colon != std::string_view::npos) s = TrimWhitespace(s.substr(colon + 1));
  return std::string(s);
}

}  // namespace gpuwatch::collect::internal
