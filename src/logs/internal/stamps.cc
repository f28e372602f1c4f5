#include "logs/internal/stamps.h"

namespace gpuwatch::logs::internal {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Length of the run of digits at s[i], at most `max`.
size_t DigitRun(std::string_view s, size_t i, size_t max) {
  size_t n = 0;
  while (i + n < s.size() && n < max && IsDigit(s[i + n])) ++n;
  return n;
}

bool DigitsAt(std::string_view s, size_t i, size_t n) {
  if (i + n > s.size()) return false;
  for (size_t k = 0; k < n; ++k)
    if (!IsDigit(s[i + k])) return false;
  return true;
}

// "1843.308145": digits, one '.', digits; nothing else.
bool IsUptime(std::string_view s) {
  const size_t dot = s.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == s.size()) return false;
  return DigitRun(s, 0, s.size()) == dot && DigitRun(s, dot + 1, s.size()) == s.size() - dot - 1;
}

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

size_t ClockLength(std::string_view s, size_t i) {
  if (!DigitsAt(s, i, 2) || i + 8 > s.size() || s[i + 2] != ':' || !DigitsAt(s, i + 3, 2) ||
      s[i + 5] != ':' || !DigitsAt(s, i + 6, 2)) {
    return 0;
  }
  size_t n = 8;
  if (i + n < s.size() && (s[i + n] == '.' || s[i + n] == ',')) {
    const size_t frac = DigitRun(s, i + n + 1, 12);
    if (frac > 0) n += 1 + frac;
  }
  // "12:34:567" is not a clock.
  if (i + n < s.size() && IsDigit(s[i + n])) return 0;
  return n;
}

size_t DateTimeLength(std::string_view s, size_t i) {
  if (!DigitsAt(s, i, 4) || i + 11 > s.size() || s[i + 4] != '-' || !DigitsAt(s, i + 5, 2) ||
      s[i + 7] != '-' || !DigitsAt(s, i + 8, 2) || (s[i + 10] != 'T' && s[i + 10] != ' ')) {
    return 0;
  }
  const size_t clock = ClockLength(s, i + 11);
  if (clock == 0) return 0;
  size_t n = 11 + clock;
  if (i + n < s.size() && s[i + n] == 'Z') {
    ++n;
  } else if (i + n < s.size() && (s[i + n] == '+' || s[i + n] == '-') &&
             DigitsAt(s, i + n + 1, 2)) {
    size_t z = 3;
    if (i + n + z < s.size() && s[i + n + z] == ':' && DigitsAt(s, i + n + z + 1, 2)) {
      z += 3;
    } else if (DigitsAt(s, i + n + z, 2)) {
      z += 2;
    }
    n += z;
  }
  return n;
}

std::optional<std::string_view> FirstBracketedTime(std::string_view s, bool allow_uptime) {
  // Each ']' closes the last '[' before it and after the previous ']' ("[[12.5] …" is the
  // inner bracket); searching only that stretch keeps the scan linear.
  size_t from = 0;
  while (from < s.size()) {
    const size_t close = s.find(']', from);
    if (close == std::string_view::npos) return std::nullopt;
    const size_t open = s.substr(from, close - from).rfind('[');
    if (open != std::string_view::npos) {
      const std::string_view content =
          TrimBlanks(s.substr(from + open + 1, close - from - open - 1));
      if (allow_uptime && IsUptime(content)) return content;
      for (size_t i = 0; i + 8 <= content.size(); ++i) {
        if (ClockLength(content, i) > 0 && (i == 0 || !IsDigit(content[i - 1]))) return content;
      }
    }
    from = close + 1;
  }
  return std::nullopt;
}

std::string_view StripPastePrefixes(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '>' ||
                        s.front() == '+' || s.front() == '`')) {
    s.remove_prefix(1);
  }
  return s;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '`')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace gpuwatch::logs::internal
