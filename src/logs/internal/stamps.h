// Timestamp and prefix scanners shared by the kernel-log and launcher-log readers. Internal to
// src/logs. They recognise a stamp's shape, not its meaning: a stamp is returned as the text
// prints it (docs/format/explain.md, Times), never converted. Pure functions on any bytes;
// thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace gpuwatch::logs::internal {

// Length of a wall clock "HH:MM:SS" at s[i], with its fraction (".123456", ",544") when one
// follows; 0 when s[i] does not start one.
size_t ClockLength(std::string_view s, size_t i);

// Length of a date and time at s[i]: "YYYY-MM-DD" then 'T' or ' ' then a clock (ClockLength),
// then an optional zone ("Z", "+02:00", "+0000"). 0 when s[i] does not start one.
// "2024-04-29T14:55:41,679700+02:00" (dmesg --time-format iso), "2024-03-04T10:11:12.123456
// +00:00" (rsyslog), "2023-10-13 17:40:02,544" (Python logging).
size_t DateTimeLength(std::string_view s, size_t i);

// The first "[...]" in `s` whose content is a time, trimmed of the blanks dmesg pads with:
// seconds since boot ("[ 1843.308145]" → "1843.308145", only when `allow_uptime`) or text
// holding a clock ("[Mon Aug  5 03:54:13 2024]", "[2026-04-22T21:26:20.599488292Z]",
// "[2023-10-13 17:40:02,544]", a `dmesg -T` stamp in any locale). Brackets that hold
// something else ("[rank3]", "[1,0]", "[80746]", "[XID found]") are skipped. The view points
// into `s`.
std::optional<std::string_view> FirstBracketedTime(std::string_view s, bool allow_uptime);

// `s` without what a paste puts before a captured line: blanks, markdown quotes ("> "), a diff's
// added-line "+", and code backticks; "+> [Fri Aug 30 …] NVRM: …" → "[Fri Aug 30 …] NVRM: …".
std::string_view StripPastePrefixes(std::string_view s);

// `s` without trailing blanks, CR and code backticks.
std::string_view TrimRight(std::string_view s);

}  // namespace gpuwatch::logs::internal
