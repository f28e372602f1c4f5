#include "collect/smi_text.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include "common/launcher_tag.h"
#include "common/strings.h"

namespace gpuwatch::collect {
namespace {

using sv = std::string_view;
constexpr size_t npos = sv::npos;

constexpr size_t kMaxFieldBytes = 256;  // names, versions, bus ids are cut here
constexpr size_t kMaxCells = 16;        // table cells per line
constexpr size_t kMaxTokens = 256;      // blank-separated tokens read per line
constexpr size_t kMaxCsvColumns = 1024;
constexpr size_t kMaxDmonColumns = 64;
constexpr size_t kMaxQDepth = 32;
constexpr size_t kMaxXmlDepth = 64;
constexpr int kNoRank = 99;

// ---- characters and small parsers ------------------------------------------------------------

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
char LowerChar(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

sv TrimL(sv s) {
  size_t i = 0;
  while (i < s.size() && IsBlank(s[i])) ++i;
  return s.substr(i);
}
sv TrimR(sv s) {
  size_t e = s.size();
  while (e > 0 && (IsBlank(s[e - 1]) || s[e - 1] == '\r')) --e;
  return s.substr(0, e);
}
sv Trim(sv s) { return TrimL(TrimR(s)); }

bool StartsWithSv(sv s, sv p) { return s.substr(0, p.size()) == p; }
bool Contains(sv s, sv p) { return s.find(p) != npos; }
bool EqualsNoCase(sv a, sv b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (LowerChar(a[i]) != LowerChar(b[i])) return false;
  return true;
}
std::string Lower(sv s) {
  std::string out(s);
  for (char& c : out) c = LowerChar(c);
  return out;
}
std::string Cut(sv s) { return std::string(s.substr(0, kMaxFieldBytes)); }

std::vector<sv> Tokens(sv s, size_t cap = kMaxTokens) {
  std::vector<sv> out;
  size_t i = 0;
  while (i < s.size() && out.size() < cap) {
    while (i < s.size() && IsBlank(s[i])) ++i;
    const size_t b = i;
    while (i < s.size() && !IsBlank(s[i])) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

std::vector<sv> SplitComma(sv s, size_t cap) {
  std::vector<sv> out;
  size_t b = 0;
  for (size_t i = 0; i <= s.size() && out.size() < cap; ++i) {
    if (i == s.size() || s[i] == ',') {
      out.push_back(Trim(s.substr(b, i - b)));
      b = i + 1;
    }
  }
  return out;
}

// A value nvidia-smi prints for "nothing to report": "N/A", "[N/A]", "[Not Supported]",
// "[Requested functionality has been deprecated]", "Not Found", "" (an empty CSV cell).
bool IsAbsent(sv v) {
  v = Trim(v);
  return v.empty() || v[0] == '[' || EqualsNoCase(v, "N/A") || EqualsNoCase(v, "Not Supported") ||
         EqualsNoCase(v, "Not Found") || EqualsNoCase(v, "Unknown Error") || v == "-" ||
         EqualsNoCase(v, "ERR!");
}

// The number at the start of `v`, with its unit after it or not ("629W", "81559 MiB",
// "100.89 W", "16x", "100%", "-8 C"); nullopt for anything else ("N/A", "ERR!", "1.2.3").
std::optional<double> Num(sv v) {
  v = Trim(v);
  if (IsAbsent(v)) return std::nullopt;
  size_t i = 0;
  if (v[0] == '-') ++i;
  const size_t d0 = i;
  while (i < v.size() && IsDigit(v[i])) ++i;
  const size_t int_digits = i - d0;
  if (int_digits == 0 || int_digits > 20) return std::nullopt;
  if (i < v.size() && v[i] == '.') {
    const size_t f0 = ++i;
    while (i < v.size() && IsDigit(v[i])) ++i;
    if (i == f0 || i - f0 > 20) return std::nullopt;
  }
  if (i < v.size() && !(IsBlank(v[i]) || IsAlpha(v[i]) || v[i] == '%')) return std::nullopt;
  auto x = ParseDouble(v.substr(0, i));
  if (!x || !std::isfinite(*x)) return std::nullopt;
  return x;
}

template <typename T>
std::optional<T> Int(sv v) {
  return ParseInt<T>(Trim(v));
}

std::optional<bool> YesNo(sv v) {
  v = Trim(v);
  if (EqualsNoCase(v, "Yes") || EqualsNoCase(v, "True") || v == "1") return true;
  if (EqualsNoCase(v, "No") || EqualsNoCase(v, "False") || v == "0") return false;
  return std::nullopt;
}

std::optional<std::string> Text(sv v) {
  v = Trim(v);
  if (IsAbsent(v)) return std::nullopt;
  return Cut(v);
}

std::optional<std::string> EccMode(sv v) {
  v = Trim(v);
  if (EqualsNoCase(v, "Enabled")) return std::string("Enabled");
  if (EqualsNoCase(v, "Disabled")) return std::string("Disabled");
  return std::nullopt;
}

// "0x0000000000000001" (the --query-gpu reasons bitmask).
std::optional<uint64_t> HexMask(sv v) {
  v = Trim(v);
  if (v.size() < 3 || v[0] != '0' || (v[1] != 'x' && v[1] != 'X')) return std::nullopt;
  return ParseInt<uint64_t>(v.substr(2), 16);
}

// NVML's bus id form, as -q, the table and the CSV print it: 00000000:18:00.0 (a 4-digit
// domain in older output).
bool IsBusId(sv s) {
  const size_t c1 = s.find(':');
  if (c1 < 4 || c1 > 8 || s.size() != c1 + 8) return false;
  for (size_t i = 0; i < c1; ++i)
    if (!IsHexDigit(s[i])) return false;
  const sv r = s.substr(c1);  // ":18:00.0"
  return IsHexDigit(r[1]) && IsHexDigit(r[2]) && r[3] == ':' && IsHexDigit(r[4]) &&
         IsHexDigit(r[5]) && r[6] == '.' && IsHexDigit(r[7]);
}

// The same bus whatever the case and domain width: "0:18:00.0".
std::string BusKey(sv s) {
  std::string out = Lower(Trim(s));
  const size_t c = out.find(':');
  if (c == std::string::npos) return out;
  size_t z = 0;
  while (z + 1 < c && out[z] == '0') ++z;
  return out.substr(z);
}

// ---- what pasting and launchers put in front of a line ----------------------------------------

// "2024-03-18T10:23:45.123Z " (kubectl logs --timestamps): its length with the blank, or 0.
size_t IsoStampLength(sv s) {
  if (s.size() < 20) return 0;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18})
    if (!IsDigit(s[i])) return 0;
  if (s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != ' ') || s[13] != ':' || s[16] != ':')
    return 0;
  size_t i = 19;
  while (i < s.size() && i < 48 && !IsBlank(s[i])) ++i;
  return i < s.size() ? i + 1 : 0;
}

// Removes markdown quotes ("> ", a diff's "+> "), code fences, mpirun tags, `srun -l` labels
// and ISO timestamps from the front of a line and turns "\#" back into "#". Unlike other
// readers' prefix strippers, what follows the prefix keeps its indentation: -q nests sections
// by it. The prefixes nest ("> [1,0]<stdout>:"), so this repeats.
sv StripPrefixes(sv s) {
  for (int round = 0; round < 8; ++round) {
    const sv t = TrimL(s);
    const auto one_blank = [](sv x) { return (!x.empty() && x[0] == ' ') ? x.substr(1) : x; };
    if (StartsWithSv(t, "```")) {
      s = t.substr(3);
    } else if (StartsWithSv(t, "+>")) {
      s = one_blank(t.substr(2));
    } else if (!t.empty() && t[0] == '>') {
      s = one_blank(t.substr(1));
    } else if (StartsWithSv(t, "\\#")) {
      s = t.substr(1);
    } else if (const size_t n = LauncherTagLength(t); n > 0) {
      s = t.substr(n);
    } else if (const size_t n = IsoStampLength(t); n > 0) {
      s = t.substr(n);
    } else {
      size_t d = 0;
      while (d < t.size() && d < 7 && IsDigit(t[d])) ++d;
      if (d > 0 && d < t.size() && t[d] == ':' && (d + 1 == t.size() || IsBlank(t[d + 1])))
        s = one_blank(t.substr(d + 1));
      else
        break;
    }
  }
  return s;
}

size_t IndentOf(sv line) {
  size_t n = 0;
  for (char c : line) {
    if (c == ' ')
      n += 1;
    else if (c == '\t')
      n += 4;
    else
      break;
  }
  return n;
}

// ---- the clock event reasons: one table -------------------------------------------------------

struct ReasonInfo {
  uint64_t bit;         // nvml.h nvmlClocksEventReason* (docs/research/clock-reasons.md)
  const char* name;     // the trace's name (explain.md)
  const char* q_label;  // the -q line
  const char* key;      // the -q -x element and --query-gpu column, after "…reason(s)_"
};

// In the order -q prints them, which is the order of `clock_event_reasons` from every form.
constexpr ReasonInfo kReasons[] = {
    {0x1, "idle", "Idle", "gpu_idle"},
    {0x2, "app_clocks", "Applications Clocks Setting", "applications_clocks_setting"},
    {0x4, "sw_power_cap", "SW Power Cap", "sw_power_cap"},
    {0x8, "hw_slowdown", "HW Slowdown", "hw_slowdown"},
    {0x40, "hw_thermal", "HW Thermal Slowdown", "hw_thermal_slowdown"},
    {0x80, "hw_power_brake", "HW Power Brake Slowdown", "hw_power_brake_slowdown"},
    {0x10, "sync_boost", "Sync Boost", "sync_boost"},
    {0x20, "sw_thermal", "SW Thermal Slowdown", "sw_thermal_slowdown"},
    {0x100, "display_clock", "Display Clock Setting", "display_clocks_setting"},
};
constexpr uint64_t kNamedReasonBits = 0x1FF;

const ReasonInfo* ReasonByLabel(sv label) {
  for (const auto& r : kReasons)
    if (EqualsNoCase(label, r.q_label)) return &r;
  if (EqualsNoCase(label, "User Defined Clocks")) return &kReasons[1];  // pre-R346 name
  return nullptr;
}

const ReasonInfo* ReasonByKey(sv key) {
  for (const auto& r : kReasons)
    if (EqualsNoCase(key, r.key)) return &r;
  if (EqualsNoCase(key, "user_defined_clocks")) return &kReasons[1];
  if (EqualsNoCase(key, "display_clock_setting")) return &kReasons[8];
  return nullptr;
}

std::vector<std::string> ReasonNames(uint64_t mask) {
  std::vector<std::string> out;
  for (const auto& r : kReasons)
    if (mask & r.bit) out.emplace_back(r.name);
  return out;
}

// "Active" / "Not Active"; nullopt for "N/A" (pre-Pascal HW Thermal/Power Brake).
std::optional<bool> ActiveValue(sv v) {
  v = Trim(v);
  if (EqualsNoCase(v, "Active")) return true;
  if (EqualsNoCase(v, "Not Active")) return false;
  return std::nullopt;
}

// -q lines (section or key names) that only nvidia-smi prints. A -q excerpt cut at the start
// begins at one of them; LooksLikeSmi wants two.
constexpr sv kQMarkers[] = {
    "Attached GPUs",
    "Product Name",
    "Product Brand",
    "GPU UUID",
    "VBIOS Version",
    "Persistence Mode",
    "Performance State",
    "Clocks Event Reasons",
    "Clocks Throttle Reasons",
    "Clocks Event Reasons Counters",
    "FB Memory Usage",
    "BAR1 Memory Usage",
    "GPU Link Info",
    "PCIe Generation",
    "Link Width",
    "Replays Since Reset",
    "ECC Errors",
    "ECC Mode",
    "Remapped Rows",
    "Retired Pages",
    "GPU Current Temp",
    "GPU Power Readings",
    "Power Readings",
    "Max Clocks",
    "Default Applications Clocks",
    "Max Customer Boost Clocks",
    "MIG Device",
    "MIG Devices",
    "Inforom Version",
    "GPU Virtualization Mode",
    "GPU Operation Mode",
};
bool IsQMarker(sv name) {
  for (sv m : kQMarkers)
    if (EqualsNoCase(name, m)) return true;
  return false;
}

// -q: "Key      : value" splits at the first ':' followed by a blank or the end. A section
// header ("PCI", "GPU 00000000:18:00.0") has none.
bool SplitKeyValue(sv t, sv* key, sv* value) {
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != ':') continue;
    if (i + 1 == t.size() || IsBlank(t[i + 1])) {
      *key = TrimR(t.substr(0, i));
      *value = Trim(t.substr(i + 1));
      return !key->empty();
    }
  }
  return false;
}

// -q's "GPU 00000000:18:00.0".
bool IsQGpuHeader(sv t, sv* bus) {
  if (!StartsWithSv(t, "GPU ")) return false;
  const sv b = Trim(t.substr(4));
  if (!IsBusId(b)) return false;
  *bus = b;
  return true;
}

// -L: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)", older "(S/N: …)".
struct ListEntry {
  int index = 0;
  std::optional<std::string> name, uuid;
};
bool ParseListLine(sv t, ListEntry* e) {
  if (!StartsWithSv(t, "GPU ")) return false;
  size_t i = 4, d = 0;
  while (i < t.size() && IsDigit(t[i]) && d < 5) ++i, ++d;
  if (d == 0 || i + 1 >= t.size() || t[i] != ':' || t[i + 1] != ' ') return false;
  const auto idx = Int<int>(t.substr(4, d));
  if (!idx) return false;
  sv rest = Trim(t.substr(i + 2));
  e->index = *idx;
  e->uuid.reset();
  if (const size_t u = rest.find(" (UUID: "); u != npos) {
    sv id = rest.substr(u + 8);
    id = id.substr(0, id.find(')'));
    if (!Trim(id).empty()) e->uuid = Cut(Trim(id));
    rest = rest.substr(0, u);
  } else if (const size_t s = rest.find(" (S/N: "); s != npos) {
    rest = rest.substr(0, s);
  } else if (rest.empty() || Contains(rest, ": ")) {
    return false;  // "GPU 0: something: else" is not a -L line
  }
  e->name = Text(rest);
  return e->name.has_value() || e->uuid.has_value();
}

bool IsListMigLine(sv t) {
  return StartsWithSv(t, "MIG ") && Contains(t, "Device") && Contains(t, "(UUID: MIG-");
}

// ---- the table ---------------------------------------------------------------------------

// "| a | b | c |" → {" a ", " b ", " c "}; a line cut before its last '|' keeps its last cell.
std::vector<sv> Cells(sv t) {
  std::vector<sv> out;
  if (t.empty() || t[0] != '|') return out;
  size_t b = 1;
  for (size_t i = 1; i <= t.size() && out.size() < kMaxCells; ++i) {
    if (i == t.size() || t[i] == '|') {
      if (i < t.size() || !Trim(t.substr(b)).empty()) out.push_back(t.substr(b, i - b));
      b = i + 1;
    }
  }
  return out;
}

bool IsBorder(sv t) {  // "+---+---+", "|===+===|", "|---+---|"
  if (t.empty() || (t[0] != '+' && t[0] != '|')) return false;
  bool rule = false;
  for (char c : t) {
    if (c == '-' || c == '=')
      rule = true;
    else if (c != '+' && c != '|' && !IsBlank(c))
      return false;
  }
  return rule;
}

// "629W /  700W", "19818MiB /  81559MiB", "N/A / N/A": the numbers either side of the slash
// that stands between blanks (the fan's "N/A" before it has one too).
std::pair<std::optional<double>, std::optional<double>> SlashPair(sv cell) {
  const auto tok = Tokens(cell);
  for (size_t i = 0; i < tok.size(); ++i) {
    if (tok[i] == "/") {
      return {i > 0 ? Num(tok[i - 1]) : std::nullopt,
              i + 1 < tok.size() ? Num(tok[i + 1]) : std::nullopt};
    }
  }
  for (sv x : tok) {  // "72W/350W"
    const size_t s = x.find('/');
    if (s != npos && s > 0 && s + 1 < x.size() && IsDigit(x[0]) && IsDigit(x[s + 1]))
      return {Num(x.substr(0, s)), Num(x.substr(s + 1))};
  }
  return {std::nullopt, std::nullopt};
}

bool IsProcType(sv s) {  // C, G, C+G, M, M+C, …
  if (s.empty() || s.size() > 7 || s[0] == '+' || s.back() == '+') return false;
  for (char c : s)
    if (c != 'C' && c != 'G' && c != 'M' && c != '+') return false;
  return true;
}

bool IsIntOrNa(sv s) { return s == "N/A" || Int<int>(s).has_value(); }

// A Processes row: "0   N/A  N/A   11327   C   /root/tools/memhog   2566MiB" (GPU GI CI PID
// Type name memory), or before MIG "0   24613   C   python   4545MiB". The name is the text
// between the type and the memory, spaces and all (Windows paths have them).
bool ParseProcessRow(sv cell, SmiProcess* p) {
  struct Tok {
    sv s;
    size_t b;
  };
  std::vector<Tok> tok;
  for (size_t i = 0; i < cell.size() && tok.size() < kMaxTokens;) {
    while (i < cell.size() && IsBlank(cell[i])) ++i;
    const size_t b = i;
    while (i < cell.size() && !IsBlank(cell[i])) ++i;
    if (i > b) tok.push_back({cell.substr(b, i - b), b});
  }
  if (tok.size() < 4) return false;
  const auto gpu = Int<int>(tok[0].s);
  if (!gpu) return false;
  size_t type_at = 0;
  if (tok.size() >= 6 && IsIntOrNa(tok[1].s) && IsIntOrNa(tok[2].s) && Int<int64_t>(tok[3].s) &&
      IsProcType(tok[4].s))
    type_at = 4;
  else if (Int<int64_t>(tok[1].s) && IsProcType(tok[2].s))
    type_at = 2;
  else
    return false;
  const auto pid = Int<int64_t>(tok[type_at - 1].s);
  if (!pid || *pid < 0) return false;
  size_t name_end = cell.size();
  std::optional<double> mem;
  const sv last = tok.back().s;
  if (tok.size() > type_at + 1 &&
      (last == "N/A" || (last.size() > 3 && last.substr(last.size() - 3) == "MiB" && Num(last)))) {
    mem = Num(last);
    name_end = tok.back().b;
  }
  const size_t name_begin = tok[type_at].b + tok[type_at].s.size();
  p->gpu = gpu;
  p->pid = pid;
  p->name =
      name_begin < name_end ? Text(cell.substr(name_begin, name_end - name_begin)) : std::nullopt;
  p->mem_mib = mem;
  return true;
}

// ---- CSV --------------------------------------------------------------------------------

enum class Col {
  kIgnore,
  kIndex,
  kName,
  kBusId,
  kUuid,
  kDriver,
  kTemp,
  kPowerDraw,
  kPowerDrawAverage,
  kPowerDrawInstant,
  kEnforcedLimit,
  kPowerLimit,
  kMemUsed,
  kMemTotal,
  kUtil,
  kGenCurrent,
  kGenMax,
  kWidthCurrent,
  kWidthMax,
  kReasonsActive,
  kReason,  // one reason's Active / Not Active column; the bit is kept beside it
  kEccMode,
  kEccVolCorrected,
  kEccVolUncorrected,
  kEccAggCorrected,
  kEccAggUncorrected,
  kRemapCorrectable,
  kRemapUncorrectable,
  kRemapPending,
  kRemapFailure,
  kSmClock,
  kGraphicsClock,
  kMaxSmClock,
  kMaxGraphicsClock,
  // --query-compute-apps
  kPid,
  kProcessName,
  kUsedMemory,
  kAppGpuBusId,
  kAppGpuUuid,
};

struct CsvCol {
  Col col = Col::kIgnore;
  uint64_t bit = 0;
};

enum class CsvKind { kGpu, kApps };

// --help-query-gpu's names (and their aliases), lower case.
struct ColName {
  sv name;
  Col col;
};
constexpr ColName kGpuCols[] = {
    {"index", Col::kIndex},
    {"name", Col::kName},
    {"gpu_name", Col::kName},
    {"pci.bus_id", Col::kBusId},
    {"gpu_bus_id", Col::kBusId},
    {"uuid", Col::kUuid},
    {"gpu_uuid", Col::kUuid},
    {"driver_version", Col::kDriver},
    {"temperature.gpu", Col::kTemp},
    {"power.draw", Col::kPowerDraw},
    {"power.draw.average", Col::kPowerDrawAverage},
    {"power.draw.instant", Col::kPowerDrawInstant},
    {"enforced.power.limit", Col::kEnforcedLimit},
    {"power.limit", Col::kPowerLimit},
    {"memory.used", Col::kMemUsed},
    {"memory.total", Col::kMemTotal},
    {"utilization.gpu", Col::kUtil},
    {"pcie.link.gen.current", Col::kGenCurrent},
    {"pcie.link.gen.max", Col::kGenMax},
    {"pcie.link.width.current", Col::kWidthCurrent},
    {"pcie.link.width.max", Col::kWidthMax},
    {"clocks_event_reasons.active", Col::kReasonsActive},
    {"clocks_throttle_reasons.active", Col::kReasonsActive},
    {"ecc.mode.current", Col::kEccMode},
    {"ecc.errors.corrected.volatile.total", Col::kEccVolCorrected},
    {"ecc.errors.uncorrected.volatile.total", Col::kEccVolUncorrected},
    {"ecc.errors.corrected.aggregate.total", Col::kEccAggCorrected},
    {"ecc.errors.uncorrected.aggregate.total", Col::kEccAggUncorrected},
    {"remapped_rows.correctable", Col::kRemapCorrectable},
    {"remapped_rows.uncorrectable", Col::kRemapUncorrectable},
    {"remapped_rows.pending", Col::kRemapPending},
    {"remapped_rows.failure", Col::kRemapFailure},
    {"clocks.current.sm", Col::kSmClock},
    {"clocks.sm", Col::kSmClock},
    {"clocks.current.graphics", Col::kGraphicsClock},
    {"clocks.gr", Col::kGraphicsClock},
    {"clocks.max.sm", Col::kMaxSmClock},
    {"clocks.max.graphics", Col::kMaxGraphicsClock},
    {"clocks.max.gr", Col::kMaxGraphicsClock},
};
constexpr ColName kAppCols[] = {
    {"pid", Col::kPid},
    {"process_name", Col::kProcessName},
    {"name", Col::kProcessName},
    {"used_gpu_memory", Col::kUsedMemory},
    {"used_memory", Col::kUsedMemory},
    {"gpu_bus_id", Col::kAppGpuBusId},
    {"gpu_uuid", Col::kAppGpuUuid},
};

// Prefixes of --query-gpu names that other CSV does not use.
constexpr sv kGpuColPrefixes[] = {
    "clocks.",
    "clocks_event_reasons",
    "clocks_throttle_reasons",
    "memory.",
    "power.",
    "enforced.power",
    "temperature.",
    "utilization.",
    "pci.",
    "pcie.",
    "ecc.",
    "remapped_rows.",
    "retired_pages",
    "fan.speed",
    "mig.mode",
    "pstate",
    "compute_mode",
    "persistence_mode",
    "driver_version",
    "vbios_version",
    "inforom.",
    "accounting.",
    "display_",
    "gom.",
    "encoder.stats",
    "gpu_bus_id",
    "gpu_uuid",
    "used_gpu_memory",
    "process_name",
};

// "memory.total [MiB]" → "memory.total"; nullopt when it is not a field name at all.
std::optional<std::string> CsvFieldName(sv f) {
  f = Trim(f);
  if (const size_t b = f.find(" ["); b != npos && !f.empty() && f.back() == ']')
    f = TrimR(f.substr(0, b));
  if (f.empty() || f.size() > 128 || !(IsAlpha(f[0]) || f[0] == '_')) return std::nullopt;
  for (char c : f)
    if (!(IsAlpha(c) || IsDigit(c) || c == '_' || c == '.')) return std::nullopt;
  return Lower(f);
}

CsvCol MapCsvCol(const std::string& name, CsvKind kind) {
  CsvCol c;
  if (kind == CsvKind::kApps) {
    for (const auto& n : kAppCols)
      if (name == n.name) c.col = n.col;
    return c;
  }
  for (const auto& n : kGpuCols)
    if (name == n.name) c.col = n.col;
  for (sv prefix : {sv("clocks_event_reasons."), sv("clocks_throttle_reasons.")}) {
    if (c.col == Col::kIgnore && StartsWithSv(name, prefix)) {
      if (const ReasonInfo* r = ReasonByKey(sv(name).substr(prefix.size()))) {
        c.col = Col::kReason;
        c.bit = r->bit;
      }
    }
  }
  return c;
}

// A --query-gpu or --query-compute-apps field list: a CSV header, or the argument of the
// `option` on a command line. Needs two fields, each a field name; a header also needs one
// that only nvidia-smi uses ("memory.used", "used_gpu_memory") or three that it knows
// ("index, name, uuid"): "pid, name" alone is any program's CSV.
bool ParseCsvFields(sv t, std::vector<CsvCol>* cols, CsvKind* kind,
                    std::optional<CsvKind> option = std::nullopt) {
  const auto fields = SplitComma(t, kMaxCsvColumns + 1);
  if (fields.size() < 2 || fields.size() > kMaxCsvColumns) return false;
  std::vector<std::string> names;
  names.reserve(fields.size());
  for (sv f : fields) {
    auto n = CsvFieldName(f);
    if (!n) return false;
    names.push_back(std::move(*n));
  }
  bool apps = false;  // --query-compute-apps (and --query-accounted-apps)
  for (const auto& n : names)
    if (n == "pid" || n == "process_name" || n == "used_gpu_memory" || n == "used_memory")
      apps = true;
  *kind = option ? *option : apps ? CsvKind::kApps : CsvKind::kGpu;
  size_t known = 0, distinctive = 0;
  cols->clear();
  for (const auto& n : names) {
    cols->push_back(MapCsvCol(n, *kind));
    if (cols->back().col != Col::kIgnore) ++known;
    for (sv p : kGpuColPrefixes)
      if (StartsWithSv(n, p)) {
        ++distinctive;
        break;
      }
  }
  return option || distinctive >= 1 || known >= 3;
}

// ---- dmon --------------------------------------------------------------------------------

// "# gpu   pwr  gtemp  mtemp    sm ..." (the '#' already removed): the sample columns.
bool IsDmonHeader(const std::vector<sv>& tok) {
  bool gpu = false, metric = false;
  for (sv t : tok) {
    if (t == "gpu") gpu = true;
    if (t == "pwr" || t == "gtemp" || t == "temp" || t == "sm" || t == "mclk" || t == "pclk" ||
        t == "fb")
      metric = true;
    if (t == "pid" || t == "command") return false;  // pmon
  }
  return gpu && metric && tok.size() <= kMaxDmonColumns;
}

// ---- accumulating one form's GPUs -----------------------------------------------------------

template <typename T>
void Fill(std::optional<T>& dst, const std::optional<T>& src) {
  if (!dst && src) dst = src;
}

struct Sum {
  double v = 0;
  bool any = false;
  void Add(std::optional<double> x) {
    if (!x) return;
    v += *x;
    any = true;
  }
  std::optional<double> Get() const { return any ? std::optional<double>(v) : std::nullopt; }
};

// One of -q's "Volatile" / "Aggregate" ECC blocks, in any driver's layout: SRAM/DRAM
// (R510+; SRAM Uncorrectable split into Parity and SEC-DED from R550), or the older "Single
// Bit" / "Double Bit" blocks whose "Total" lines are the counts.
struct EccPeriod {
  Sum corrected, uncorrected, sram_unc_plain, sram_unc_parts, single_bit, double_bit;
  std::optional<double> Corrected() const {
    return single_bit.any ? single_bit.Get() : corrected.Get();
  }
  std::optional<double> Uncorrected() const {
    if (double_bit.any) return double_bit.Get();
    Sum s = uncorrected;
    s.Add(sram_unc_parts.any ? sram_unc_parts.Get() : sram_unc_plain.Get());
    return s.Get();
  }
  // key: "SRAM Correctable", "sram_uncorrectable_parity", "Total" under "Double Bit", …
  void Add(sv key, sv block, std::optional<double> x) {
    const std::string k = Lower(key);
    const std::string b = Lower(block);
    if (b == "single bit" || b == "single_bit") {
      if (k == "total") single_bit.Add(x);
      return;
    }
    if (b == "double bit" || b == "double_bit") {
      if (k == "total") double_bit.Add(x);
      return;
    }
    if (Contains(k, "threshold")) return;
    const bool sram = Contains(k, "sram");
    if (Contains(k, "uncorrectable")) {
      if (!sram)
        uncorrected.Add(x);
      else if (Contains(k, "parity") || Contains(k, "sec"))
        sram_unc_parts.Add(x);
      else
        sram_unc_plain.Add(x);
    } else if (Contains(k, "correctable")) {
      corrected.Add(x);
    }
  }
};

// Where a value came from ranks it within one form: -q prints "Power Draw" (or, from R570,
// "Average Power Draw" and "Instantaneous Power Draw"), and the limit as "Current Power
// Limit" (older: "Power Limit" and "Enforced Power Limit", the one in force).
struct Ranked {
  std::optional<double> value;
  int rank = kNoRank;
  void Offer(std::optional<double> x, int r) {
    if (x && r < rank) {
      value = x;
      rank = r;
    }
  }
};

struct GpuAcc {
  SmiGpu g;
  bool index_weak = false;  // g.index is the order of appearance, not the GPU's index
  Ranked power, limit, sm_clock, max_sm_clock;
  bool reasons_seen = false;
  uint64_t reasons = 0;
  EccPeriod vol, agg;
  bool usage_seen = false;  // the table's second row
};

struct ProcAcc {
  SmiProcess p;
  std::optional<size_t> acc;   // the GPU block it is listed in (-q, -q -x), in its instance
  std::optional<size_t> slot;  // that GPU's place in the report, once merged
  std::optional<std::string> gpu_bus_id, gpu_uuid;  // --query-compute-apps
  size_t instance = 0;
};

enum class Form { kNone, kTable, kQ, kXml, kCsv, kDmon, kList };

const char* FormName(Form f) {
  switch (f) {
    case Form::kTable:
      return "table";
    case Form::kQ:
      return "q";
    case Form::kXml:
      return "xml";
    case Form::kCsv:
      return "csv";
    case Form::kDmon:
      return "dmon";
    case Form::kList:
      return "list";
    case Form::kNone:
      break;
  }
  return "";
}

// ---- the parser -------------------------------------------------------------------------

class Parser {
 public:
  SmiReport Run(sv text);

 private:
  // One run of lines of one form (a table, one -q, one CSV header with its rows, …).
  struct Instance {
    Form form = Form::kNone;
    size_t id = 0;
    bool recognised = false;
    std::optional<std::string> driver, cuda;
    std::vector<GpuAcc> gpus;
  };

  void Line(sv raw);
  bool TableLine(sv t);
  bool DmonLine(sv t);
  void NoteQueryCommand(sv t);
  bool CsvLine(sv t);
  void CsvRow(const std::vector<sv>& fields);
  bool ListLine(sv t);
  bool QLine(sv line, sv t);
  void QKey(sv key, sv value);
  bool XmlLine(sv t);
  void XmlOpen(sv name, sv attrs);
  void XmlClose(sv name);
  void XmlLeaf(sv name, sv text);
  GpuAcc* XmlGpu();  // the <gpu> being read, made up when the excerpt was cut above it

  // Switches to form `f` (ending the instance of another form), or starts a new instance of it.
  void Claim(Form f, bool restart = false);
  void Flush();
  void ResetFormState();
  void XmlPop(bool read_leaf);
  void Finish();

  std::optional<size_t> AddGpu(std::optional<int> index, bool weak);
  std::optional<size_t> FindGpuByIndex(int index) const;
  std::optional<size_t> FindMatch(const SmiGpu& g) const;
  void Merge(SmiGpu& dst, size_t slot, const GpuAcc& src);
  void AddProcess(ProcAcc p);
  void AddMig(size_t acc, SmiMigDevice m);
  void Warn(std::string w);

  SmiReport r_;
  std::vector<bool> weak_;             // r_.gpus[i].index is a guess
  std::vector<std::string> bus_keys_;  // BusKey(r_.gpus[i].bus_id), "" without one
  std::vector<ProcAcc> procs_;
  Instance cur_;
  size_t instances_ = 0;
  size_t line_no_ = 0;
  bool last_line_ = false;
  size_t warnings_dropped_ = 0;
  bool gpu_cap_warned_ = false, proc_cap_warned_ = false, mig_cap_warned_ = false;
  uint64_t unnamed_bits_warned_ = 0;

  // table
  std::optional<size_t> table_gpu_;  // the GPU whose rows are being read
  // -q
  struct QSection {
    size_t indent;
    std::string name;
  };
  std::vector<QSection> q_stack_;
  std::optional<size_t> q_gpu_, q_proc_;
  std::optional<QSection> q_lookback_;  // an unclaimed section header, on line q_lookback_line_
  size_t q_lookback_line_ = 0;
  size_t prev_line_ = 0;  // the number of the last line that was not blank
  // -q -x
  struct XmlElem {
    std::string name;
    bool had_child = false;
    std::string text;
  };
  std::vector<XmlElem> xml_stack_;
  size_t xml_overflow_ = 0;
  std::optional<size_t> xml_gpu_, xml_proc_;
  bool xml_in_mig_ = false;
  bool xml_root_closed_ = false;
  bool xml_gpu_made_up_ = false;  // xml_gpu_ was made up for an excerpt cut above its <gpu>
  // CSV
  std::vector<CsvCol> csv_cols_;
  CsvKind csv_kind_ = CsvKind::kGpu;
  size_t csv_rows_ = 0;
  std::vector<CsvCol> pending_cols_;  // from a command line's --query-gpu=
  CsvKind pending_kind_ = CsvKind::kGpu;
  // dmon
  std::vector<std::string> dmon_cols_;
};

void Parser::Warn(std::string w) {
  if (r_.warnings.size() < kMaxSmiWarnings)
    r_.warnings.push_back(std::move(w));
  else
    ++warnings_dropped_;
}

SmiReport Parser::Run(sv text) {
  const size_t last_content = text.find_last_not_of(" \t\r\n");
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const size_t end = nl == npos ? text.size() : nl;
    sv raw = text.substr(pos, end - pos);
    ++line_no_;
    last_line_ = last_content != npos && pos <= last_content && last_content < end;
    if (raw.size() > kMaxSmiLineBytes) {
      Warn("line " + std::to_string(line_no_) + ": longer than " +
           std::to_string(kMaxSmiLineBytes) + " bytes; read up to there");
      raw = raw.substr(0, kMaxSmiLineBytes);
    }
    Line(raw);
    pos = end + 1;
  }
  Flush();
  Finish();
  return std::move(r_);
}

void Parser::Line(sv raw) {
  const sv line = TrimR(StripPrefixes(raw));
  const sv t = TrimL(line);
  if (t.empty()) return;
  if (!(t[0] == '<' && XmlLine(t)) && !((t[0] == '|' || t[0] == '+') && TableLine(t)) &&
      !DmonLine(t)) {
    NoteQueryCommand(t);
    if (!CsvLine(t) && !ListLine(t)) QLine(line, t);
  }
  prev_line_ = line_no_;
}

void Parser::Claim(Form f, bool restart) {
  if (f != Form::kQ) q_lookback_.reset();
  if (f != Form::kCsv) pending_cols_.clear();
  if (cur_.form == f && !restart) return;
  Flush();
  cur_.form = f;
  cur_.id = ++instances_;
}

void Parser::ResetFormState() {
  table_gpu_.reset();
  q_stack_.clear();
  q_gpu_.reset();
  q_proc_.reset();
  xml_stack_.clear();
  xml_overflow_ = 0;
  xml_gpu_.reset();
  xml_proc_.reset();
  xml_in_mig_ = false;
  xml_root_closed_ = false;
  xml_gpu_made_up_ = false;
  csv_cols_.clear();
  csv_rows_ = 0;
  dmon_cols_.clear();
}

std::optional<size_t> Parser::AddGpu(std::optional<int> index, bool weak) {
  if (cur_.gpus.size() >= kMaxSmiGpus) {
    if (!gpu_cap_warned_)
      Warn("more than " + std::to_string(kMaxSmiGpus) + " GPUs; the rest ignored");
    gpu_cap_warned_ = true;
    return std::nullopt;
  }
  GpuAcc a;
  a.g.index = index;
  a.index_weak = weak;
  cur_.gpus.push_back(std::move(a));
  return cur_.gpus.size() - 1;
}

std::optional<size_t> Parser::FindGpuByIndex(int index) const {
  for (size_t i = 0; i < cur_.gpus.size(); ++i)
    if (cur_.gpus[i].g.index == index) return i;
  return std::nullopt;
}

void Parser::AddProcess(ProcAcc p) {
  if (procs_.size() >= kMaxSmiProcesses) {
    if (!proc_cap_warned_)
      Warn("more than " + std::to_string(kMaxSmiProcesses) + " processes; the rest ignored");
    proc_cap_warned_ = true;
    return;
  }
  p.instance = cur_.id;
  procs_.push_back(std::move(p));
}

void Parser::AddMig(size_t acc, SmiMigDevice m) {
  auto& list = cur_.gpus[acc].g.mig_devices;
  if (list.size() >= kMaxSmiMigDevicesPerGpu) {
    if (!mig_cap_warned_)
      Warn("more than " + std::to_string(kMaxSmiMigDevicesPerGpu) +
           " MIG devices on a GPU; the rest ignored");
    mig_cap_warned_ = true;
    return;
  }
  list.push_back(m);
}

// ---- table -------------------------------------------------------------------------------

bool Parser::TableLine(sv t) {
  const bool in_table = cur_.form == Form::kTable;
  if (t[0] == '+' || IsBorder(t)) {
    if (in_table) table_gpu_.reset();
    return true;  // a rule line: nothing to read, in a table or out of one
  }
  if (Contains(t, "NVIDIA-SMI")) {
    Claim(Form::kTable, /*restart=*/in_table);
    cur_.recognised = true;
    const auto after = [&](sv label) -> std::optional<std::string> {
      const size_t p = t.find(label);
      if (p == npos) return std::nullopt;
      const auto tok = Tokens(t.substr(p + label.size()), 1);
      if (tok.empty() || tok[0] == "|") return std::nullopt;
      return Text(tok[0]);
    };
    cur_.driver = after("Driver Version:");
    cur_.cuda = after("CUDA Version:");
    return true;
  }
  const auto cells = Cells(t);
  if (cells.size() == 1 && (Contains(t, "MIG devices:") || Contains(t, "Processes:"))) {
    Claim(Form::kTable);
    cur_.recognised = true;
    table_gpu_.reset();
    return true;
  }
  // GPU row: "|   0  NVIDIA H100 80GB HBM3   On  |   00000000:00:09.0 Off |   0 |"
  if (cells.size() >= 2) {
    const auto c0 = Tokens(cells[0]);
    const auto c1 = Tokens(cells[1]);
    const auto index = c0.size() >= 2 ? Int<int>(c0[0]) : std::nullopt;
    if (index && !c1.empty() && IsBusId(c1[0])) {
      if (in_table && FindGpuByIndex(*index)) Claim(Form::kTable, /*restart=*/true);
      Claim(Form::kTable);
      cur_.recognised = true;
      table_gpu_ = AddGpu(index, false);
      if (!table_gpu_) return true;
      SmiGpu& g = cur_.gpus[*table_gpu_].g;
      g.bus_id = Cut(c1[0]);
      // The name runs from after the index to the persistence mode (or the driver model, on
      // Windows), when that is there.
      const sv cell = Trim(cells[0]);
      sv name = TrimL(cell.substr(c0[0].size()));
      const sv last = c0.back();
      if (c0.size() >= 3 && (last == "On" || last == "Off" || last == "N/A" || last == "WDDM" ||
                             last == "TCC" || last == "MCDM"))
        name = TrimR(name.substr(0, name.size() - last.size()));
      g.name = Text(name);
      if (cells.size() >= 3) {
        const auto ecc = Tokens(cells[2]);
        if (!ecc.empty()) g.ecc.volatile_uncorrected = Num(ecc[0]);
      }
      return true;
    }
    // MIG devices row: "|  0    2   0   0  |   26MiB / 40448MiB   | 60  0 | 3 0 3 0 3 |"
    if (c0.size() == 4 && Contains(cells[1], "MiB")) {
      std::optional<int> v[4];
      bool ints = true;
      for (size_t i = 0; i < 4; ++i) ints = ints && (v[i] = Int<int>(c0[i])).has_value();
      if (ints) {
        Claim(Form::kTable);
        cur_.recognised = true;
        table_gpu_.reset();
        auto acc = FindGpuByIndex(*v[0]);
        if (!acc) acc = AddGpu(v[0], false);
        if (!acc) return true;
        SmiMigDevice m;
        m.gpu = v[0];
        m.gi = v[1];
        m.ci = v[2];
        m.mig_dev = v[3];
        std::tie(m.mem_used_mib, m.mem_total_mib) = SlashPair(cells[1]);
        AddMig(*acc, m);
        return true;
      }
    }
    // The GPU's second row: "| N/A   59C    P0   629W /  700W |  19818MiB /  81559MiB |
    // 100%   Default |".
    if (in_table && table_gpu_ && !cur_.gpus[*table_gpu_].usage_seen) {
      GpuAcc& a = cur_.gpus[*table_gpu_];
      a.usage_seen = true;
      for (sv x : c0)
        if (x.size() >= 2 && x.back() == 'C' && Int<int>(x.substr(0, x.size() - 1)))
          a.g.temp_c = Num(x.substr(0, x.size() - 1));
      std::tie(a.g.power_w, a.g.power_limit_w) = SlashPair(cells[0]);
      std::tie(a.g.mem_used_mib, a.g.mem_total_mib) = SlashPair(cells[1]);
      if (cells.size() >= 3) {
        const auto u = Tokens(cells[2]);
        if (!u.empty() && u[0].back() == '%') a.g.util_pct = Num(u[0]);
      }
      return true;
    }
  }
  if (cells.size() == 1) {
    SmiProcess p;
    if (ParseProcessRow(cells[0], &p)) {
      Claim(Form::kTable);
      cur_.recognised = true;
      ProcAcc pa;
      pa.p = std::move(p);
      AddProcess(std::move(pa));
      return true;
    }
  }
  return true;  // the table's header rows, the MIG block's second rows, …
}

// ---- dmon --------------------------------------------------------------------------------

bool Parser::DmonLine(sv t) {
  const bool in_dmon = cur_.form == Form::kDmon;
  if (t[0] == '#') {
    const auto tok = Tokens(t.substr(1), kMaxDmonColumns + 1);
    if (IsDmonHeader(tok)) {
      std::vector<std::string> cols(tok.begin(), tok.end());
      // dmon repeats its header every screenful: the same columns go on with the same run.
      Claim(Form::kDmon, /*restart=*/!in_dmon || cols != dmon_cols_);
      cur_.recognised = true;
      dmon_cols_ = std::move(cols);
      return true;
    }
    if (in_dmon) return true;  // "# Idx  W  C  C  % …", the units
    return false;
  }
  if (!in_dmon || dmon_cols_.empty()) return false;
  auto tok = Tokens(t, kMaxDmonColumns + 1);
  if (tok.size() != dmon_cols_.size()) {
    if (!last_line_ || tok.size() < 2 || tok.size() > dmon_cols_.size()) return false;
    Warn("dmon line " + std::to_string(line_no_) + ": cut after " + std::to_string(tok.size()) +
         " of " + std::to_string(dmon_cols_.size()) + " columns; its last one is not read");
    tok.pop_back();
  }
  std::optional<int> index;
  for (size_t i = 0; i < tok.size(); ++i)
    if (dmon_cols_[i] == "gpu") index = Int<int>(tok[i]);
  if (!index) return false;
  Claim(Form::kDmon);
  auto acc = FindGpuByIndex(*index);
  if (!acc) acc = AddGpu(index, false);
  if (!acc) return true;
  SmiGpu& g = cur_.gpus[*acc].g;
  // The last sample wins: each row overwrites what it has a column for.
  for (size_t i = 0; i < tok.size(); ++i) {
    const std::string& c = dmon_cols_[i];
    if (c == "pwr")
      g.power_w = Num(tok[i]);
    else if (c == "gtemp" || c == "temp")
      g.temp_c = Num(tok[i]);
    else if (c == "sm")
      g.util_pct = Num(tok[i]);
    else if (c == "fb")
      g.mem_used_mib = Num(tok[i]);  // dmon's "MB" are MiB (NVML's bytes / 2^20)
    else if (c == "pclk")
      g.sm_clock_mhz = Num(tok[i]);
  }
  return true;
}

// ---- CSV ---------------------------------------------------------------------------------

void Parser::NoteQueryCommand(sv t) {
  for (sv opt : {sv("--query-gpu="), sv("--query-compute-apps=")}) {
    const size_t p = t.find(opt);
    if (p == npos) continue;
    sv list = t.substr(p + opt.size());
    if (!list.empty() && (list[0] == '"' || list[0] == '\'')) {
      const char q = list[0];
      list = list.substr(1);
      list = list.substr(0, list.find(q));
    } else {
      size_t e = 0;
      while (e < list.size() && !IsBlank(list[e])) ++e;
      list = list.substr(0, e);
    }
    const CsvKind kind = opt == "--query-gpu=" ? CsvKind::kGpu : CsvKind::kApps;
    CsvKind got = kind;
    std::vector<CsvCol> cols;
    if (ParseCsvFields(list, &cols, &got, kind)) {
      pending_cols_ = std::move(cols);
      pending_kind_ = kind;
    }
    return;
  }
}

bool Parser::CsvLine(sv t) {
  std::vector<CsvCol> cols;
  CsvKind kind = CsvKind::kGpu;
  if (ParseCsvFields(t, &cols, &kind)) {
    // The header below a command line answers that command's query.
    if (cols.size() == pending_cols_.size()) ParseCsvFields(t, &cols, &kind, pending_kind_);
    Claim(Form::kCsv, /*restart=*/true);
    cur_.recognised = true;
    csv_cols_ = std::move(cols);
    csv_kind_ = kind;
    return true;
  }
  if (cur_.form != Form::kCsv && !pending_cols_.empty()) {
    if (SplitComma(t, kMaxCsvColumns + 1).size() != pending_cols_.size()) return false;
    cols = std::move(pending_cols_);
    kind = pending_kind_;
    Claim(Form::kCsv, /*restart=*/true);
    cur_.recognised = true;
    csv_cols_ = std::move(cols);
    csv_kind_ = kind;
  }
  if (cur_.form != Form::kCsv || csv_cols_.empty()) return false;
  auto fields = SplitComma(t, kMaxCsvColumns + 1);
  if (fields.size() != csv_cols_.size()) {
    if (!last_line_ || fields.size() < 2 || fields.size() > csv_cols_.size()) return false;
    Warn("csv line " + std::to_string(line_no_) + ": cut after " + std::to_string(fields.size()) +
         " of " + std::to_string(csv_cols_.size()) + " fields; its last one is not read");
    fields.pop_back();
  }
  Claim(Form::kCsv);
  CsvRow(fields);
  return true;
}

void Parser::CsvRow(const std::vector<sv>& f) {
  const size_t row = csv_rows_++;
  if (csv_kind_ == CsvKind::kApps) {
    ProcAcc pa;
    for (size_t i = 0; i < f.size(); ++i) {
      switch (csv_cols_[i].col) {
        case Col::kPid:
          pa.p.pid = Int<int64_t>(f[i]);
          break;
        case Col::kProcessName:
          pa.p.name = Text(f[i]);
          break;
        case Col::kUsedMemory:
          pa.p.mem_mib = Num(f[i]);
          break;
        case Col::kAppGpuBusId:
          pa.gpu_bus_id = Text(f[i]);
          break;
        case Col::kAppGpuUuid:
          pa.gpu_uuid = Text(f[i]);
          break;
        default:
          break;
      }
    }
    if (pa.p.pid && *pa.p.pid >= 0) AddProcess(std::move(pa));
    return;
  }
  std::optional<int> index;
  for (size_t i = 0; i < f.size(); ++i)
    if (csv_cols_[i].col == Col::kIndex) index = Int<int>(f[i]);
  const bool weak = !index;
  if (weak) index = static_cast<int>(std::min<size_t>(row, INT_MAX));
  const auto acc = AddGpu(index, weak);
  if (!acc) return;
  GpuAcc& a = cur_.gpus[*acc];
  SmiGpu& g = a.g;
  std::optional<uint64_t> mask;
  for (size_t i = 0; i < f.size(); ++i) {
    const sv v = f[i];
    switch (csv_cols_[i].col) {
      case Col::kName:
        g.name = Text(v);
        break;
      case Col::kBusId:
        g.bus_id = Text(v);
        break;
      case Col::kUuid:
        g.uuid = Text(v);
        break;
      case Col::kDriver:
        Fill(cur_.driver, Text(v));
        break;
      case Col::kTemp:
        g.temp_c = Num(v);
        break;
      case Col::kPowerDraw:
        a.power.Offer(Num(v), 0);
        break;
      case Col::kPowerDrawAverage:
        a.power.Offer(Num(v), 1);
        break;
      case Col::kPowerDrawInstant:
        a.power.Offer(Num(v), 2);
        break;
      case Col::kEnforcedLimit:
        a.limit.Offer(Num(v), 0);
        break;
      case Col::kPowerLimit:
        a.limit.Offer(Num(v), 1);
        break;
      case Col::kMemUsed:
        g.mem_used_mib = Num(v);
        break;
      case Col::kMemTotal:
        g.mem_total_mib = Num(v);
        break;
      case Col::kUtil:
        g.util_pct = Num(v);
        break;
      case Col::kGenCurrent:
        g.pcie_gen_current = Num(v);
        break;
      case Col::kGenMax:
        g.pcie_gen_max = Num(v);
        break;
      case Col::kWidthCurrent:
        g.pcie_width_current = Num(v);
        break;
      case Col::kWidthMax:
        g.pcie_width_max = Num(v);
        break;
      case Col::kReasonsActive:
        if (!mask) mask = HexMask(v);
        break;
      case Col::kReason:
        if (const auto act = ActiveValue(v)) {
          a.reasons_seen = true;
          if (*act) a.reasons |= csv_cols_[i].bit;
        }
        break;
      case Col::kEccMode:
        g.ecc.mode = EccMode(v);
        break;
      case Col::kEccVolCorrected:
        g.ecc.volatile_corrected = Num(v);
        break;
      case Col::kEccVolUncorrected:
        g.ecc.volatile_uncorrected = Num(v);
        break;
      case Col::kEccAggCorrected:
        g.ecc.aggregate_corrected = Num(v);
        break;
      case Col::kEccAggUncorrected:
        g.ecc.aggregate_uncorrected = Num(v);
        break;
      case Col::kRemapCorrectable:
        g.ecc.remapped_rows_correctable = Num(v);
        break;
      case Col::kRemapUncorrectable:
        g.ecc.remapped_rows_uncorrectable = Num(v);
        break;
      case Col::kRemapPending:
        g.ecc.remapped_rows_pending = YesNo(v);
        break;
      case Col::kRemapFailure:
        g.ecc.remapped_rows_failure = YesNo(v);
        break;
      case Col::kSmClock:
        a.sm_clock.Offer(Num(v), 0);
        break;
      case Col::kGraphicsClock:
        a.sm_clock.Offer(Num(v), 1);
        break;
      case Col::kMaxSmClock:
        a.max_sm_clock.Offer(Num(v), 0);
        break;
      case Col::kMaxGraphicsClock:
        a.max_sm_clock.Offer(Num(v), 1);
        break;
      default:
        break;
    }
  }
  // The bitmask is what NVML returned; the per-reason columns are nvidia-smi's reading of it.
  if (mask) {
    a.reasons_seen = true;
    a.reasons = *mask & kNamedReasonBits;
    const uint64_t unnamed = *mask & ~kNamedReasonBits & ~unnamed_bits_warned_;
    if (unnamed) {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(unnamed));
      Warn(std::string("clock event reason bits ") + hex +
           " have no trace name (board limit, reliability, unknown); left out");
      unnamed_bits_warned_ |= unnamed;
    }
  }
}

// ---- -L ----------------------------------------------------------------------------------

bool Parser::ListLine(sv t) {
  if (IsListMigLine(t)) {
    if (cur_.form == Form::kList) Claim(Form::kList);
    return true;
  }
  ListEntry e;
  if (!ParseListLine(t, &e)) return false;
  Claim(Form::kList, /*restart=*/cur_.form == Form::kList && FindGpuByIndex(e.index));
  cur_.recognised = true;
  const auto acc = AddGpu(e.index, false);
  if (!acc) return true;
  cur_.gpus[*acc].g.name = e.name;
  cur_.gpus[*acc].g.uuid = e.uuid;
  return true;
}

// ---- -q ----------------------------------------------------------------------------------

bool Parser::QLine(sv line, sv t) {
  const bool in_q = cur_.form == Form::kQ;
  if (Contains(t, "NVSMI LOG")) {
    Claim(Form::kQ, /*restart=*/true);
    cur_.recognised = true;
    return true;
  }
  sv bus;
  if (IsQGpuHeader(t, &bus)) {
    Claim(Form::kQ);
    cur_.recognised = true;
    q_stack_.clear();
    q_proc_.reset();
    q_gpu_ = AddGpu(static_cast<int>(cur_.gpus.size()), /*weak=*/true);
    if (q_gpu_) cur_.gpus[*q_gpu_].g.bus_id = Cut(bus);
    return true;
  }
  const size_t indent = IndentOf(line);
  sv key, value;
  const bool is_key = SplitKeyValue(t, &key, &value);
  const sv name = is_key ? key : t;
  if (!in_q) {
    const bool starter =
        IsQMarker(name) ||
        (is_key && (EqualsNoCase(key, "Driver Version") || EqualsNoCase(key, "CUDA Version")));
    if (!starter) {
      if (!is_key && name.size() <= 64) {
        q_lookback_ = QSection{indent, std::string(name)};
        q_lookback_line_ = line_no_;
      }
      return false;
    }
    const auto lookback = q_lookback_line_ == prev_line_ ? q_lookback_ : std::nullopt;
    Claim(Form::kQ);
    cur_.recognised = true;
    // An excerpt cut just below a section's header ("Temperature", then its first key).
    if (lookback && lookback->indent < indent) q_stack_.push_back(*lookback);
  }
  while (!q_stack_.empty() && q_stack_.back().indent >= indent) q_stack_.pop_back();
  if (!is_key) {
    if (q_stack_.size() >= kMaxQDepth) return true;
    q_stack_.push_back({indent, Cut(name.substr(0, 64))});
    if (EqualsNoCase(name, "MIG Device")) {
      if (!q_gpu_) q_gpu_ = AddGpu(static_cast<int>(cur_.gpus.size()), true);
      if (q_gpu_) AddMig(*q_gpu_, SmiMigDevice{});
    }
    return true;
  }
  QKey(key, value);
  return true;
}

void Parser::QKey(sv key, sv value) {
  const auto top = [&]() -> sv { return q_stack_.empty() ? sv() : sv(q_stack_.back().name); };
  const auto in = [&](sv name) {
    for (const auto& s : q_stack_)
      if (EqualsNoCase(s.name, name)) return true;
    return false;
  };
  const auto is = [](sv a, sv b) { return EqualsNoCase(a, b); };
  if (is(key, "Driver Version")) return Fill(cur_.driver, Text(value));
  if (is(key, "CUDA Version")) return Fill(cur_.cuda, Text(value));
  const auto gpu = [&]() -> GpuAcc* {
    if (!q_gpu_) q_gpu_ = AddGpu(static_cast<int>(cur_.gpus.size()), true);
    return q_gpu_ ? &cur_.gpus[*q_gpu_] : nullptr;
  };

  if (in("MIG Device")) {
    GpuAcc* a = gpu();
    if (!a) return;
    if (a->g.mig_devices.empty()) AddMig(*q_gpu_, SmiMigDevice{});  // cut above its header
    if (a->g.mig_devices.empty()) return;
    SmiMigDevice& m = a->g.mig_devices.back();
    if (is(key, "Index")) Fill(m.mig_dev, Int<int>(value));
    if (is(key, "GPU Instance ID")) Fill(m.gi, Int<int>(value));
    if (is(key, "Compute Instance ID")) Fill(m.ci, Int<int>(value));
    if (Contains(Lower(top()), "fb memory usage")) {  // "Shared FB Memory Usage" from R570
      if (is(key, "Total")) Fill(m.mem_total_mib, Num(value));
      if (is(key, "Used")) Fill(m.mem_used_mib, Num(value));
    }
    return;
  }
  if (is(top(), "Processes")) {
    if (is(key, "Process ID")) {
      q_proc_.reset();
      GpuAcc* a = gpu();
      const auto pid = Int<int64_t>(value);
      if (!a || !pid || *pid < 0) return;
      ProcAcc pa;
      pa.p.gpu = a->g.index;
      pa.p.pid = pid;
      pa.acc = q_gpu_;
      const size_t before = procs_.size();
      AddProcess(std::move(pa));
      if (procs_.size() > before) q_proc_ = before;
    } else if (q_proc_ && is(key, "Name")) {
      Fill(procs_[*q_proc_].p.name, Text(value));
    } else if (q_proc_ && is(key, "Used GPU Memory")) {
      Fill(procs_[*q_proc_].p.mem_mib, Num(value));
    }
    return;
  }
  if (is(key, "Product Name")) {
    if (GpuAcc* a = gpu()) Fill(a->g.name, Text(value));
  } else if (is(key, "GPU UUID")) {
    if (GpuAcc* a = gpu()) Fill(a->g.uuid, Text(value));
  } else if (is(top(), "PCI") && is(key, "Bus Id")) {
    if (GpuAcc* a = gpu()) Fill(a->g.bus_id, Text(value));
  } else if (is(top(), "PCIe Generation")) {
    if (is(key, "Max")) {
      if (GpuAcc* a = gpu()) Fill(a->g.pcie_gen_max, Num(value));
    } else if (is(key, "Current")) {
      if (GpuAcc* a = gpu()) Fill(a->g.pcie_gen_current, Num(value));
    }
  } else if (is(top(), "Link Width")) {
    if (is(key, "Max")) {
      if (GpuAcc* a = gpu()) Fill(a->g.pcie_width_max, Num(value));
    } else if (is(key, "Current")) {
      if (GpuAcc* a = gpu()) Fill(a->g.pcie_width_current, Num(value));
    }
  } else if (is(top(), "Clocks Event Reasons") || is(top(), "Clocks Throttle Reasons")) {
    const ReasonInfo* r = ReasonByLabel(key);
    const auto act = ActiveValue(value);
    if (r && act) {
      if (GpuAcc* a = gpu()) {
        a->reasons_seen = true;
        if (*act) a->reasons |= r->bit;
      }
    }
  } else if (is(top(), "FB Memory Usage")) {
    if (is(key, "Total")) {
      if (GpuAcc* a = gpu()) Fill(a->g.mem_total_mib, Num(value));
    } else if (is(key, "Used")) {
      if (GpuAcc* a = gpu()) Fill(a->g.mem_used_mib, Num(value));
    }
  } else if (is(top(), "Utilization")) {
    if (is(key, "Gpu"))
      if (GpuAcc* a = gpu()) Fill(a->g.util_pct, Num(value));
  } else if (is(top(), "ECC Mode")) {
    if (is(key, "Current"))
      if (GpuAcc* a = gpu()) Fill(a->g.ecc.mode, EccMode(value));
  } else if (in("ECC Errors") && (in("Volatile") || in("Aggregate"))) {
    if (GpuAcc* a = gpu()) (in("Volatile") ? a->vol : a->agg).Add(key, top(), Num(value));
  } else if (is(top(), "Remapped Rows")) {
    GpuAcc* a = nullptr;
    if (is(key, "Correctable Error")) {
      if ((a = gpu())) Fill(a->g.ecc.remapped_rows_correctable, Num(value));
    } else if (is(key, "Uncorrectable Error")) {
      if ((a = gpu())) Fill(a->g.ecc.remapped_rows_uncorrectable, Num(value));
    } else if (is(key, "Pending")) {
      if ((a = gpu())) Fill(a->g.ecc.remapped_rows_pending, YesNo(value));
    } else if (is(key, "Remapping Failure Occurred")) {
      if ((a = gpu())) Fill(a->g.ecc.remapped_rows_failure, YesNo(value));
    }
  } else if (is(top(), "Temperature")) {
    if (is(key, "GPU Current Temp"))
      if (GpuAcc* a = gpu()) Fill(a->g.temp_c, Num(value));
  } else if (is(top(), "GPU Power Readings") || is(top(), "Power Readings")) {
    int rank = kNoRank;
    if (is(key, "Power Draw")) rank = 0;
    if (is(key, "Average Power Draw")) rank = 1;
    if (is(key, "Instantaneous Power Draw")) rank = 2;
    if (rank != kNoRank)
      if (GpuAcc* a = gpu()) a->power.Offer(Num(value), rank);
    rank = kNoRank;
    if (is(key, "Current Power Limit")) rank = 0;
    if (is(key, "Enforced Power Limit")) rank = 1;
    if (is(key, "Power Limit")) rank = 2;
    if (rank != kNoRank)
      if (GpuAcc* a = gpu()) a->limit.Offer(Num(value), rank);
  } else if (is(top(), "Clocks") && is(key, "SM")) {
    if (GpuAcc* a = gpu()) a->sm_clock.Offer(Num(value), 0);
  } else if (is(top(), "Max Clocks") && is(key, "SM")) {
    if (GpuAcc* a = gpu()) a->max_sm_clock.Offer(Num(value), 0);
  }
}

// ---- -q -x -------------------------------------------------------------------------------

// Elements that begin a -q -x excerpt cut above its root.
constexpr sv kXmlMarkers[] = {
    "nvidia_smi_log",
    "gpu",
    "product_name",
    "pci_bus_id",
    "fb_memory_usage",
    "temperature",
    "clocks_event_reasons",
    "clocks_throttle_reasons",
    "ecc_errors",
    "remapped_rows",
    "gpu_power_readings",
    "power_readings",
    "mig_devices",
    "mig_device",
    "processes",
    "process_info",
    "utilization",
    "pci",
    "driver_version",
    "cuda_version",
};

sv XmlName(sv tag) {
  size_t e = 0;
  while (e < tag.size() && !IsBlank(tag[e]) && tag[e] != '/' && tag[e] != '>') ++e;
  return tag.substr(0, e);
}

std::string XmlDecode(sv s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '&') {
      bool done = false;
      for (auto [ent, ch] : {std::pair<sv, char>{"&amp;", '&'},
                             {"&lt;", '<'},
                             {"&gt;", '>'},
                             {"&quot;", '"'},
                             {"&apos;", '\''}}) {
        if (s.substr(i, ent.size()) == ent) {
          out += ch;
          i += ent.size() - 1;
          done = true;
          break;
        }
      }
      if (done) continue;
    }
    out += s[i];
  }
  return out;
}

bool Parser::XmlLine(sv t) {
  const bool root = Contains(t, "<?xml") || Contains(t, "<nvidia_smi_log");
  if (cur_.form != Form::kXml) {
    bool start = root || Contains(t, "nvidia_smi_log") || Contains(t, "<gpu id=");
    const sv first = XmlName(t.substr(1));
    for (sv m : kXmlMarkers) start = start || first == m;
    if (!start) return false;
    Claim(Form::kXml);
  } else if (root && (!cur_.gpus.empty() || !xml_stack_.empty())) {
    Claim(Form::kXml, /*restart=*/true);  // another document after a cut one
  }
  for (size_t i = 0; i < t.size();) {
    if (t[i] == '<') {
      const size_t j = t.find('>', i);
      if (j == npos) break;  // a tag cut at the end of the line
      const sv tag = t.substr(i + 1, j - i - 1);
      i = j + 1;
      if (tag.empty() || tag[0] == '?' || tag[0] == '!') {
        if (Contains(tag, "nvidia_smi_log")) cur_.recognised = true;
        continue;
      }
      if (tag[0] == '/') {
        XmlClose(Trim(tag.substr(1)));
        continue;
      }
      const sv name = XmlName(tag);
      if (name.empty()) continue;
      XmlOpen(name, tag.substr(name.size()));
      if (tag.back() == '/') XmlClose(name);
    } else {
      size_t j = t.find('<', i);
      if (j == npos) j = t.size();
      if (!xml_stack_.empty() && xml_overflow_ == 0) {
        std::string& text = xml_stack_.back().text;
        const size_t room = kMaxFieldBytes - std::min(kMaxFieldBytes, text.size());
        text.append(t.substr(i, std::min(j - i, room)));
      }
      i = j;
    }
  }
  if (xml_root_closed_) Flush();
  return true;
}

void Parser::XmlOpen(sv name, sv attrs) {
  if (!xml_stack_.empty()) xml_stack_.back().had_child = true;
  if (xml_overflow_ > 0 || xml_stack_.size() >= kMaxXmlDepth) {
    ++xml_overflow_;
    return;
  }
  xml_stack_.push_back({Cut(name.substr(0, 64)), false, {}});
  if (name == "nvidia_smi_log") {
    cur_.recognised = true;
  } else if (name == "gpu" && (xml_stack_.size() == 1 ||
                               xml_stack_[xml_stack_.size() - 2].name == "nvidia_smi_log")) {
    cur_.recognised = true;
    xml_proc_.reset();
    xml_in_mig_ = false;
    xml_gpu_ = AddGpu(static_cast<int>(cur_.gpus.size()), /*weak=*/true);
    xml_gpu_made_up_ = false;
    // <gpu id="00000000:01:00.0">
    const size_t p = attrs.find("id=\"");
    if (xml_gpu_ && p != npos) {
      const sv id = attrs.substr(p + 4, attrs.find('"', p + 4) - (p + 4));
      if (IsBusId(id)) cur_.gpus[*xml_gpu_].g.bus_id = Cut(id);
    }
  } else if (name == "mig_device") {
    if (XmlGpu()) {
      AddMig(*xml_gpu_, SmiMigDevice{});
      xml_in_mig_ = true;
    }
  } else if (name == "process_info") {
    xml_proc_.reset();
    if (!XmlGpu()) return;
    ProcAcc pa;
    pa.p.gpu = cur_.gpus[*xml_gpu_].g.index;
    pa.acc = xml_gpu_;
    const size_t before = procs_.size();
    AddProcess(std::move(pa));
    if (procs_.size() > before) xml_proc_ = before;
  }
}

GpuAcc* Parser::XmlGpu() {
  if (!xml_gpu_) {
    xml_gpu_ = AddGpu(static_cast<int>(cur_.gpus.size()), /*weak=*/true);
    xml_gpu_made_up_ = true;
  }
  return xml_gpu_ ? &cur_.gpus[*xml_gpu_] : nullptr;
}

void Parser::XmlClose(sv name) {
  if (xml_overflow_ > 0) {
    --xml_overflow_;
    return;
  }
  size_t at = xml_stack_.size();
  while (at > 0 && xml_stack_[at - 1].name != name) --at;
  if (at == 0) {
    // Closes nothing we saw open: the excerpt was cut above it. When that is a MIG device,
    // what was read so far into the GPU made up for the excerpt was the device's (its
    // <fb_memory_usage>), not the GPU's: start that GPU again.
    if ((name == "mig_device" || name == "mig_devices") && xml_gpu_ && xml_gpu_made_up_) {
      GpuAcc fresh;
      fresh.g.index = cur_.gpus[*xml_gpu_].g.index;
      fresh.index_weak = true;
      cur_.gpus[*xml_gpu_] = std::move(fresh);
    }
    return;
  }
  // Elements left open inside the one closed (a broken excerpt) end with it, unread.
  while (xml_stack_.size() > at) XmlPop(/*read_leaf=*/false);
  XmlPop(/*read_leaf=*/true);
}

void Parser::XmlPop(bool read_leaf) {
  const XmlElem& e = xml_stack_.back();
  if (read_leaf && !e.had_child) XmlLeaf(e.name, Trim(e.text));
  const std::string name = std::move(xml_stack_.back().name);
  xml_stack_.pop_back();
  if (name == "gpu") {
    xml_gpu_.reset();
    xml_gpu_made_up_ = false;
  }
  if (name == "mig_device") xml_in_mig_ = false;
  if (name == "process_info") {
    // A process without a pid is no process: drop what was started for it.
    if (xml_proc_ && *xml_proc_ + 1 == procs_.size() && !procs_.back().p.pid) procs_.pop_back();
    xml_proc_.reset();
  }
  if (name == "nvidia_smi_log") xml_root_closed_ = true;
}

void Parser::XmlLeaf(sv name, sv raw) {
  const std::string decoded = XmlDecode(raw);
  const sv text(decoded);
  // The leaf is on top of the stack; p0 is its parent, in() looks at all its ancestors.
  const sv p0 = xml_stack_.size() >= 2 ? sv(xml_stack_[xml_stack_.size() - 2].name) : sv();
  const auto in = [&](sv n) {
    for (size_t i = 0; i + 1 < xml_stack_.size(); ++i)
      if (xml_stack_[i].name == n) return true;
    return false;
  };
  if (name == "driver_version" && !in("gpu")) return Fill(cur_.driver, Text(text));
  if (name == "cuda_version" && !in("gpu")) return Fill(cur_.cuda, Text(text));
  if (xml_proc_ && in("process_info")) {
    SmiProcess& p = procs_[*xml_proc_].p;
    if (name == "pid") Fill(p.pid, Int<int64_t>(text));
    if (name == "process_name") Fill(p.name, Text(text));
    if (name == "used_memory") Fill(p.mem_mib, Num(text));
    return;
  }
  if (in("processes") || in("accounted_processes")) return;
  if (in("mig_device")) {
    if (!xml_in_mig_ || !xml_gpu_ || cur_.gpus[*xml_gpu_].g.mig_devices.empty()) return;
    SmiMigDevice& m = cur_.gpus[*xml_gpu_].g.mig_devices.back();
    if (name == "index" && p0 == "mig_device") Fill(m.mig_dev, Int<int>(text));
    if (name == "gpu_instance_id") Fill(m.gi, Int<int>(text));
    if (name == "compute_instance_id") Fill(m.ci, Int<int>(text));
    if (Contains(p0, "fb_memory_usage")) {
      if (name == "total") Fill(m.mem_total_mib, Num(text));
      if (name == "used") Fill(m.mem_used_mib, Num(text));
    }
    return;
  }
  // From here on a field makes up a GPU for an excerpt cut above its <gpu> (XmlGpu).
  const auto gpu = [&]() { return XmlGpu(); };
  if (name == "product_name") {
    if (GpuAcc* a = gpu()) Fill(a->g.name, Text(text));
  } else if (name == "uuid" && (p0 == "gpu" || p0.empty())) {
    if (GpuAcc* a = gpu()) Fill(a->g.uuid, Text(text));
  } else if (name == "pci_bus_id" && p0 == "pci") {
    if (GpuAcc* a = gpu()) Fill(a->g.bus_id, Text(text));
  } else if (p0 == "pcie_gen" && (name == "max_link_gen" || name == "current_link_gen")) {
    if (GpuAcc* a = gpu())
      Fill(name == "max_link_gen" ? a->g.pcie_gen_max : a->g.pcie_gen_current, Num(text));
  } else if (p0 == "link_widths" && (name == "max_link_width" || name == "current_link_width")) {
    if (GpuAcc* a = gpu())
      Fill(name == "max_link_width" ? a->g.pcie_width_max : a->g.pcie_width_current, Num(text));
  } else if (p0 == "clocks_event_reasons" || p0 == "clocks_throttle_reasons") {
    sv key = name;
    for (sv prefix : {sv("clocks_event_reason_"), sv("clocks_throttle_reason_")})
      if (StartsWithSv(key, prefix)) key = key.substr(prefix.size());
    const ReasonInfo* r = ReasonByKey(key);
    const auto act = ActiveValue(text);
    if (r && act)
      if (GpuAcc* a = gpu()) {
        a->reasons_seen = true;
        if (*act) a->reasons |= r->bit;
      }
  } else if (p0 == "fb_memory_usage" && (name == "total" || name == "used")) {
    if (GpuAcc* a = gpu())
      Fill(name == "total" ? a->g.mem_total_mib : a->g.mem_used_mib, Num(text));
  } else if (p0 == "utilization" && name == "gpu_util") {
    if (GpuAcc* a = gpu()) Fill(a->g.util_pct, Num(text));
  } else if (p0 == "ecc_mode" && name == "current_ecc") {
    if (GpuAcc* a = gpu()) Fill(a->g.ecc.mode, EccMode(text));
  } else if (in("ecc_errors") && (in("volatile") || in("aggregate"))) {
    if (GpuAcc* a = gpu()) (in("volatile") ? a->vol : a->agg).Add(name, p0, Num(text));
  } else if (p0 == "remapped_rows") {
    GpuAcc* a = nullptr;
    if (name == "remapped_row_corr") {
      if ((a = gpu())) Fill(a->g.ecc.remapped_rows_correctable, Num(text));
    } else if (name == "remapped_row_unc") {
      if ((a = gpu())) Fill(a->g.ecc.remapped_rows_uncorrectable, Num(text));
    } else if (name == "remapped_row_pending") {
      if ((a = gpu())) Fill(a->g.ecc.remapped_rows_pending, YesNo(text));
    } else if (name == "remapped_row_failure") {
      if ((a = gpu())) Fill(a->g.ecc.remapped_rows_failure, YesNo(text));
    }
  } else if (p0 == "temperature" && name == "gpu_temp") {
    if (GpuAcc* a = gpu()) Fill(a->g.temp_c, Num(text));
  } else if (p0 == "gpu_power_readings" || p0 == "power_readings") {
    int rank = kNoRank;
    if (name == "power_draw") rank = 0;
    if (name == "average_power_draw") rank = 1;
    if (name == "instant_power_draw") rank = 2;
    if (rank != kNoRank)
      if (GpuAcc* a = gpu()) a->power.Offer(Num(text), rank);
    rank = kNoRank;
    if (name == "current_power_limit") rank = 0;
    if (name == "enforced_power_limit") rank = 1;
    if (name == "power_limit") rank = 2;
    if (rank != kNoRank)
      if (GpuAcc* a = gpu()) a->limit.Offer(Num(text), rank);
  } else if (p0 == "clocks" && name == "sm_clock") {
    if (GpuAcc* a = gpu()) a->sm_clock.Offer(Num(text), 0);
  } else if (p0 == "max_clocks" && name == "sm_clock") {
    if (GpuAcc* a = gpu()) a->max_sm_clock.Offer(Num(text), 0);
  }
}

// ---- merging -----------------------------------------------------------------------------

std::optional<size_t> Parser::FindMatch(const SmiGpu& g) const {
  const auto& gpus = r_.gpus;
  const std::string bus = g.bus_id ? BusKey(*g.bus_id) : std::string();
  if (g.bus_id) {
    for (size_t i = 0; i < gpus.size(); ++i)
      if (gpus[i].bus_id && bus_keys_[i] == bus) return i;
  }
  if (g.uuid) {
    for (size_t i = 0; i < gpus.size(); ++i)
      if (gpus[i].uuid && EqualsNoCase(*gpus[i].uuid, *g.uuid)) return i;
  }
  if (g.index) {
    for (size_t i = 0; i < gpus.size(); ++i) {
      const SmiGpu& o = gpus[i];
      if (o.index != g.index) continue;
      if (o.bus_id && g.bus_id && bus_keys_[i] != bus) continue;
      if (o.uuid && g.uuid && !EqualsNoCase(*o.uuid, *g.uuid)) continue;
      return i;
    }
  }
  return std::nullopt;
}

void Parser::Merge(SmiGpu& d, size_t slot, const GpuAcc& a) {
  const SmiGpu& s = a.g;
  if (!d.index || (weak_[slot] && !a.index_weak && s.index)) {
    d.index = s.index;
    weak_[slot] = a.index_weak;
  }
  Fill(d.name, s.name);
  if (!d.bus_id && s.bus_id) {
    d.bus_id = s.bus_id;
    bus_keys_[slot] = BusKey(*s.bus_id);
  }
  Fill(d.temp_c, s.temp_c);
  Fill(d.power_w, s.power_w);
  Fill(d.power_limit_w, s.power_limit_w);
  Fill(d.mem_used_mib, s.mem_used_mib);
  Fill(d.mem_total_mib, s.mem_total_mib);
  Fill(d.util_pct, s.util_pct);
  Fill(d.pcie_gen_current, s.pcie_gen_current);
  Fill(d.pcie_gen_max, s.pcie_gen_max);
  Fill(d.pcie_width_current, s.pcie_width_current);
  Fill(d.pcie_width_max, s.pcie_width_max);
  Fill(d.clock_event_reasons, s.clock_event_reasons);
  Fill(d.ecc.mode, s.ecc.mode);
  Fill(d.ecc.volatile_corrected, s.ecc.volatile_corrected);
  Fill(d.ecc.volatile_uncorrected, s.ecc.volatile_uncorrected);
  Fill(d.ecc.aggregate_corrected, s.ecc.aggregate_corrected);
  Fill(d.ecc.aggregate_uncorrected, s.ecc.aggregate_uncorrected);
  Fill(d.ecc.remapped_rows_correctable, s.ecc.remapped_rows_correctable);
  Fill(d.ecc.remapped_rows_uncorrectable, s.ecc.remapped_rows_uncorrectable);
  Fill(d.ecc.remapped_rows_pending, s.ecc.remapped_rows_pending);
  Fill(d.ecc.remapped_rows_failure, s.ecc.remapped_rows_failure);
  if (d.mig_devices.empty()) d.mig_devices = s.mig_devices;
  Fill(d.sm_clock_mhz, s.sm_clock_mhz);
  Fill(d.max_sm_clock_mhz, s.max_sm_clock_mhz);
  Fill(d.uuid, s.uuid);
}

void Parser::Flush() {
  if (cur_.form == Form::kNone) return;
  if (cur_.form == Form::kXml && !xml_stack_.empty())
    Warn("-q -x output cut inside <" + xml_stack_.back().name + ">");
  if (cur_.recognised) {
    const std::string name = FormName(cur_.form);
    bool known = false;
    for (const auto& f : r_.forms) known = known || f == name;
    if (!known) r_.forms.push_back(name);
  }
  Fill(r_.driver_version, cur_.driver);
  Fill(r_.cuda_version, cur_.cuda);
  std::vector<std::optional<size_t>> slot_of(cur_.gpus.size());
  for (size_t i = 0; i < cur_.gpus.size(); ++i) {
    GpuAcc& a = cur_.gpus[i];
    SmiGpu& g = a.g;
    Fill(g.power_w, a.power.value);
    Fill(g.power_limit_w, a.limit.value);
    Fill(g.sm_clock_mhz, a.sm_clock.value);
    Fill(g.max_sm_clock_mhz, a.max_sm_clock.value);
    if (a.reasons_seen) Fill(g.clock_event_reasons, std::optional(ReasonNames(a.reasons)));
    Fill(g.ecc.volatile_corrected, a.vol.Corrected());
    Fill(g.ecc.volatile_uncorrected, a.vol.Uncorrected());
    Fill(g.ecc.aggregate_corrected, a.agg.Corrected());
    Fill(g.ecc.aggregate_uncorrected, a.agg.Uncorrected());
    if (const auto m = FindMatch(g)) {
      Merge(r_.gpus[*m], *m, a);
      slot_of[i] = m;
    } else if (r_.gpus.size() < kMaxSmiGpus) {
      r_.gpus.push_back(std::move(g));
      weak_.push_back(a.index_weak);
      bus_keys_.push_back(r_.gpus.back().bus_id ? BusKey(*r_.gpus.back().bus_id) : "");
      slot_of[i] = r_.gpus.size() - 1;
    } else if (!gpu_cap_warned_) {
      Warn("more than " + std::to_string(kMaxSmiGpus) + " GPUs; the rest ignored");
      gpu_cap_warned_ = true;
    }
  }
  for (auto it = procs_.rbegin(); it != procs_.rend() && it->instance == cur_.id; ++it)
    if (it->acc && *it->acc < slot_of.size()) it->slot = slot_of[*it->acc];
  cur_ = Instance{};
  ResetFormState();
}

void Parser::Finish() {
  for (auto& g : r_.gpus)
    for (auto& m : g.mig_devices)
      if (!m.gpu) m.gpu = g.index;
  // The same process listed by two forms (a table and a -q of the same moment) is one.
  std::map<std::pair<int, int64_t>, size_t> seen;  // (gpu, pid) → the instance that listed it
  for (auto& pa : procs_) {
    SmiProcess p = std::move(pa.p);
    if (pa.slot) {
      p.gpu = r_.gpus[*pa.slot].index;
    } else if (pa.gpu_bus_id || pa.gpu_uuid) {
      SmiGpu probe;
      probe.bus_id = pa.gpu_bus_id;
      probe.uuid = pa.gpu_uuid;
      if (const auto m = FindMatch(probe)) p.gpu = r_.gpus[*m].index;
    }
    const auto key = std::make_pair(p.gpu.value_or(INT_MIN), p.pid.value_or(-1));
    const auto [it, fresh] = seen.emplace(key, pa.instance);
    if (!fresh && it->second != pa.instance) continue;
    r_.processes.push_back(std::move(p));
  }
  if (warnings_dropped_ > 0)
    r_.warnings.push_back(std::to_string(warnings_dropped_) + " more warnings not shown");
}

// ---- JSON --------------------------------------------------------------------------------

nlohmann::json JsonNum(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  const double x = *v;
  if (x == std::floor(x) && std::fabs(x) < 9007199254740992.0) return static_cast<int64_t>(x);
  return x;
}

template <typename T>
nlohmann::json JsonInt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json JsonStr(const std::optional<std::string>& v) {
  return v ? nlohmann::json(SanitizeUtf8(*v)) : nlohmann::json(nullptr);
}

nlohmann::json JsonBool(const std::optional<bool>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

bool LooksLikeSmi(std::string_view text) {
  int q_markers = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const size_t end = nl == npos ? text.size() : nl;
    const sv raw = text.substr(pos, std::min(end - pos, kMaxSmiLineBytes));
    pos = end + 1;
    const sv line = TrimR(StripPrefixes(raw));
    const sv t = TrimL(line);
    if (t.empty()) continue;
    if ((Contains(t, "NVIDIA-SMI") && Contains(t, "Driver Version")) || Contains(t, "NVSMI LOG") ||
        Contains(t, "<nvidia_smi_log") || Contains(t, "nvsmi_device_v"))
      return true;
    ListEntry e;
    if (ParseListLine(t, &e) && e.uuid && StartsWithSv(*e.uuid, "GPU-")) return true;
    if (t[0] == '#' && IsDmonHeader(Tokens(t.substr(1), kMaxDmonColumns + 1))) return true;
    std::vector<CsvCol> cols;
    CsvKind kind = CsvKind::kGpu;
    if (ParseCsvFields(t, &cols, &kind)) return true;
    if (t[0] == '|') {
      if (Contains(t, "MIG devices:")) return true;
      const auto cells = Cells(t);
      if (cells.size() >= 3) {
        const auto c0 = Tokens(cells[0]);
        const auto c1 = Tokens(cells[1]);
        if (c0.size() >= 2 && Int<int>(c0[0]) && !c1.empty() && IsBusId(c1[0])) return true;
      }
      continue;
    }
    sv bus, key, value;
    if (IsQGpuHeader(t, &bus) || IsQMarker(SplitKeyValue(t, &key, &value) ? key : t))
      if (++q_markers >= 2) return true;
  }
  return false;
}

SmiReport ParseSmiText(std::string_view text) { return Parser().Run(text); }

nlohmann::json SmiReportJson(const SmiReport& r) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : r.gpus) {
    nlohmann::json migs = nlohmann::json::array();
    for (const auto& m : g.mig_devices)
      migs.push_back({{"gpu", JsonInt(m.gpu)},
                      {"gi", JsonInt(m.gi)},
                      {"ci", JsonInt(m.ci)},
                      {"mig_dev", JsonInt(m.mig_dev)},
                      {"mem_used_mib", JsonNum(m.mem_used_mib)},
                      {"mem_total_mib", JsonNum(m.mem_total_mib)}});
    nlohmann::json reasons = nullptr;
    if (g.clock_event_reasons) {
      reasons = nlohmann::json::array();
      for (const auto& s : *g.clock_event_reasons) reasons.push_back(SanitizeUtf8(s));
    }
    const SmiEcc& e = g.ecc;
    gpus.push_back({{"index", JsonInt(g.index)},
                    {"name", JsonStr(g.name)},
                    {"bus_id", JsonStr(g.bus_id)},
                    {"temp_c", JsonNum(g.temp_c)},
                    {"power_w", JsonNum(g.power_w)},
                    {"power_limit_w", JsonNum(g.power_limit_w)},
                    {"mem_used_mib", JsonNum(g.mem_used_mib)},
                    {"mem_total_mib", JsonNum(g.mem_total_mib)},
                    {"util_pct", JsonNum(g.util_pct)},
                    {"pcie_gen_current", JsonNum(g.pcie_gen_current)},
                    {"pcie_gen_max", JsonNum(g.pcie_gen_max)},
                    {"pcie_width_current", JsonNum(g.pcie_width_current)},
                    {"pcie_width_max", JsonNum(g.pcie_width_max)},
                    {"clock_event_reasons", reasons},
                    {"ecc",
                     {{"mode", JsonStr(e.mode)},
                      {"volatile_corrected", JsonNum(e.volatile_corrected)},
                      {"volatile_uncorrected", JsonNum(e.volatile_uncorrected)},
                      {"aggregate_corrected", JsonNum(e.aggregate_corrected)},
                      {"aggregate_uncorrected", JsonNum(e.aggregate_uncorrected)},
                      {"remapped_rows_correctable", JsonNum(e.remapped_rows_correctable)},
                      {"remapped_rows_uncorrectable", JsonNum(e.remapped_rows_uncorrectable)},
                      {"remapped_rows_pending", JsonBool(e.remapped_rows_pending)},
                      {"remapped_rows_failure", JsonBool(e.remapped_rows_failure)}}},
                    {"mig_devices", migs}});
  }
  nlohmann::json procs = nlohmann::json::array();
  for (const auto& p : r.processes)
    procs.push_back({{"gpu", JsonInt(p.gpu)},
                     {"pid", JsonInt(p.pid)},
                     {"name", JsonStr(p.name)},
                     {"mem_mib", JsonNum(p.mem_mib)}});
  return {{"driver_version", JsonStr(r.driver_version)},
          {"cuda_version", JsonStr(r.cuda_version)},
          {"gpus", gpus},
          {"processes", procs}};
}

}  // namespace gpuwatch::collect
