// What a launcher puts in front of each line it relays: mpirun's "[1,0]<stdout>:" and
// "--tag-output" rank tags, and bracketed pids ("[80746]"). One reading for every parser of
// pasted tool output (nccl-tests, nvidia-smi).
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <string_view>

namespace gpuwatch {

// The length of a launcher tag at s[0] — "[0]", "[80746]", "[1,0]", "[1,0]<stdout>:",
// "<stderr>:", "<stddiag>:" — or 0 when there is none. Bus ids ("[0x16]", "[0000:04:00]") are
// not tags: they are not all digits.
inline size_t LauncherTagLength(std::string_view s) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (s.empty() || s[0] != '[') return 0;
  size_t i = 1, digits = 0;
  while (i < s.size() && digit(s[i]) && digits < 12) ++i, ++digits;
  if (digits == 0) return 0;
  if (i < s.size() && s[i] == ',') {
    ++i;
    digits = 0;
    while (i < s.size() && digit(s[i]) && digits < 12) ++i, ++digits;
    if (digits == 0) return 0;
  }
  if (i >= s.size() || s[i] != ']') return 0;
  ++i;
  for (std::string_view stream : {"<stdout>:", "<stderr>:", "<stddiag>:"}) {
    if (s.substr(i).substr(0, stream.size()) == stream) return i + stream.size();
  }
  return i;
}

}  // namespace gpuwatch
