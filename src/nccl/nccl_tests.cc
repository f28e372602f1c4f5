#include "nccl/nccl_tests.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "common/launcher_tag.h"
#include "common/strings.h"
#include "nccl/nccl_log.h"

namespace gpuwatch::nccl {
namespace {

using sv = std::string_view;
constexpr size_t npos = sv::npos;
// A row has 13 tokens (21 with -P per-iteration columns, 2 more with a timestamp); a line with
// many more is prose, and splitting it further is wasted work.
constexpr size_t kMaxRowTokens = 40;
// Ranks, pids and devices above these are garbage, not a run.
constexpr int64_t kMaxSaneRank = 10'000'000;
constexpr int64_t kMaxSanePid = int64_t{1} << 40;
constexpr int kMaxDeviceIndex = 4096;
constexpr size_t kMaxQuotedBytes = 80;  // of a line quoted in a warning

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsAlpha(char c) { return IsLower(c) || (c >= 'A' && c <= 'Z'); }
bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

sv TrimLeft(sv s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  return s;
}
sv TrimRight(sv s) {
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}
sv Trim(sv s) { return TrimRight(TrimLeft(s)); }

bool StartsWithSv(sv s, sv p) { return s.substr(0, p.size()) == p; }
bool EndsWithSv(sv s, sv p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

// Whitespace-separated tokens, at most `max` (nullopt when there are more).
std::optional<std::vector<sv>> Tokens(sv s, size_t max) {
  std::vector<sv> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && IsBlank(s[i])) ++i;
    if (i == s.size()) break;
    size_t j = i;
    while (j < s.size() && !IsBlank(s[j])) ++j;
    if (out.size() == max) return std::nullopt;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<uint64_t> ParseU64(sv s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  for (char c : s)
    if (!IsDigit(c)) return std::nullopt;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseI64(sv s) {
  const bool neg = !s.empty() && s[0] == '-';
  auto v = ParseU64(neg ? s.substr(1) : s);
  if (!v || *v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return neg ? -static_cast<int64_t>(*v) : static_cast<int64_t>(*v);
}

// A finite number as nccl-tests prints it: "135.8", "12646", "1.2e+08" (getFloatStr switches to
// an exponent when a value outgrows its column).
std::optional<double> ParseNumber(sv s) {
  if (s.empty() || s.size() > 32) return std::nullopt;
  if (!IsDigit(s[0]) && !(s[0] == '-' && s.size() > 1 && IsDigit(s[1]))) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// A type or reduction-op name: "float", "bfloat16", "f8e4m3", "sum", "none".
bool IsNameToken(sv s) {
  if (s.empty() || s.size() > 16 || !IsAlpha(s[0])) return false;
  for (char c : s)
    if (!IsAlpha(c) && !IsDigit(c) && c != '_') return false;
  return true;
}

std::string Text(sv s, size_t max_bytes = kMaxPerfTextBytes) {
  if (s.size() <= max_bytes) return PrintableText(s);
  return PrintableText(s.substr(0, max_bytes)) + "…";
}

// Runs of blanks as one space: pasted captures have TABs where nccl-tests printed spaces.
std::string CollapseBlanks(sv s) {
  std::string out;
  out.reserve(s.size());
  for (char c : Trim(s)) {
    if (!IsBlank(c))
      out += c;
    else if (out.back() != ' ')
      out += ' ';
  }
  return out;
}

// Removes what launchers and pasting put in front of a line: blanks, code fences, markdown
// quotes ("> ", a diff's "+> "), mpirun tags, `srun -l` labels ("12: "), and turns an escaped
// "\#" back into "#". The prefixes nest ("> [1,0]<stdout>:#"), so this repeats.
sv StripPrefixes(sv s) {
  for (int round = 0; round < 8; ++round) {
    const sv before = s;
    s = TrimLeft(s);
    if (StartsWithSv(s, "```")) s.remove_prefix(3);
    if (StartsWithSv(s, "+>") || StartsWithSv(s, "+#")) s.remove_prefix(1);
    if (!s.empty() && s[0] == '>') s.remove_prefix(1);
    if (StartsWithSv(s, "\\#")) s.remove_prefix(1);
    s.remove_prefix(LauncherTagLength(s));
    size_t d = 0;
    while (d < s.size() && d < 7 && IsDigit(s[d])) ++d;
    if (d > 0 && d < s.size() && s[d] == ':' && (d + 1 == s.size() || IsBlank(s[d + 1])))
      s.remove_prefix(d + 1);
    if (s.size() == before.size()) break;
  }
  return TrimLeft(s);
}

// A row with the launcher tags that interrupt it replaced by blanks: nccl-tests writes a row in
// several printf calls and `mpirun --tag-output` tags each ("-1[0]    1626.5").
std::string UntagRow(sv s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = s[i] == '[' ? LauncherTagLength(s.substr(i)) : 0;
    if (n > 0) {
      out += ' ';
      i += n;
    } else {
      out += s[i++];
    }
  }
  return out;
}

bool IsDateToken(sv s) {  // 2025-01-30
  return s.size() == 10 && s[4] == '-' && s[7] == '-' && IsDigit(s[0]) && IsDigit(s[9]);
}
bool IsClockToken(sv s) {  // 10:00:00
  return s.size() == 8 && s[2] == ':' && s[5] == ':' && IsDigit(s[0]) && IsDigit(s[7]);
}

// "all_reduce_perf" from a token of a command line: "./build/all_reduce_perf",
// "all_reduce_perf_mpi". "" when the token names no nccl-tests binary.
std::string PerfBinary(sv tok) {
  const size_t slash = tok.rfind('/');
  if (slash != npos) tok.remove_prefix(slash + 1);
  if (EndsWithSv(tok, "_mpi")) tok.remove_suffix(4);
  if (!EndsWithSv(tok, "_perf") || tok.size() <= 5 || tok.size() > 48) return "";
  for (char c : tok)
    if (!IsLower(c) && !IsDigit(c) && c != '_') return "";
  if (!IsLower(tok[0])) return "";
  return std::string(tok);
}

// NCCL_VERSION_CODE: major*10000 + minor*100 + patch since NCCL 2.9, major*1000 + minor*100 +
// patch before.
std::string VersionFromCode(int code) {
  if (code >= 20900)
    return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
           std::to_string(code % 100);
  return std::to_string(code / 1000) + "." + std::to_string(code / 100 % 10) + "." +
         std::to_string(code % 100);
}

class Parser {
 public:
  Result<PerfReport> Run(sv text);

 private:
  void Warn(std::string message) {
    if (r_.warnings.size() < kMaxPerfWarnings)
      r_.warnings.push_back(std::move(message));
    else
      ++warnings_dropped_;
  }
  std::string At() const { return "line " + std::to_string(line_no_) + ": "; }

  void Comment(sv body);
  bool ColumnHeader(sv s);
  bool RankLine(sv body);
  void ParamLine(const std::vector<sv>& toks);
  void NotComment(sv s, sv raw);
  bool TryRow(sv s);
  bool TryLayout(const std::vector<sv>& toks, size_t lead, size_t width, PerfRow* row) const;
  void AddRow(PerfRow row);
  void SetCollective(std::string name, CollectiveSource source);
  void InferCollective();
  void Finish();

  PerfReport r_;
  size_t line_no_ = 0;
  size_t warnings_dropped_ = 0;
  bool found_ = false;  // anything nccl-tests-like
  bool header_seen_ = false;
  bool header_has_root_ = true;    // the column header names "root" (every layout since 2019)
  bool header_per_iter_ = false;   // -P: four per-iteration columns after each #wrong
  bool header_old_error_ = false;  // the pre-2.x "error" column instead of "#wrong"
  bool rows_closed_ = false;       // a second run of another collective began
  bool rows_capped_ = false;
  bool ranks_capped_ = false;
  size_t duplicate_rows_ = 0;
  std::set<uint64_t> sizes_;
  std::set<int> ranks_seen_;
  size_t first_text_line_ = 0;
  std::string first_text_;
};

void Parser::SetCollective(std::string name, CollectiveSource source) {
  if (name.empty()) return;
  if (r_.collective.empty() || source < r_.collective_source) {
    r_.collective = std::move(name);
    r_.collective_source = source;
  }
}

bool Parser::ColumnHeader(sv s) {
  auto toks = Tokens(s, kMaxRowTokens);
  if (!toks) return false;
  bool algbw = false, busbw = false, redop = false, root = false, per_iter = false, err = false;
  for (sv t : *toks) {
    algbw |= t == "algbw";
    busbw |= t == "busbw";
    redop |= t == "redop";
    root |= t == "root";
    per_iter |= t == "i_min";
    err |= t == "error";
  }
  if (!algbw || !busbw) return false;
  header_seen_ = true;
  // A header cut at the start may have lost "redop" and "root": then rows decide by their width.
  header_has_root_ = root || !redop;
  header_per_iter_ = per_iter;
  header_old_error_ = err;
  return true;
}

bool Parser::RankLine(sv body) {
  // Rank N [Group N] Pid N on HOST device N [BUS] NAME — the GPU name has several words, so
  // only the fields before it are split.
  std::vector<sv> t;
  sv rest = body;
  for (int i = 0; i < 11; ++i) {
    rest = TrimLeft(rest);
    if (rest.empty()) break;
    size_t e = 0;
    while (e < rest.size() && !IsBlank(rest[e])) ++e;
    t.push_back(rest.substr(0, e));
    rest.remove_prefix(e);
  }
  if (t.size() < 2 || t[0] != "Rank") return false;
  size_t i = 1;
  PerfRank pr;
  auto rank = ParseI64(t[i++]);
  if (!rank || *rank < 0 || *rank > kMaxSaneRank) return false;
  pr.rank = static_cast<int>(*rank);
  if (i + 1 < t.size() && t[i] == "Group") {
    auto g = ParseI64(t[i + 1]);
    if (!g || *g < -1 || *g > kMaxSaneRank) return false;
    pr.group = static_cast<int>(*g);
    i += 2;
  }
  if (i + 1 >= t.size() || t[i] != "Pid") return false;
  auto pid = ParseI64(t[i + 1]);
  if (!pid || *pid < 0 || *pid > kMaxSanePid) return false;
  pr.pid = *pid;
  i += 2;
  if (i + 1 >= t.size() || t[i] != "on") return false;
  pr.host = Text(t[i + 1], 255);
  i += 2;
  if (i + 1 >= t.size() || t[i] != "device") return false;
  auto dev = ParseI64(t[i + 1]);
  if (!dev || *dev < 0 || *dev > kMaxDeviceIndex) return false;
  pr.device = static_cast<int>(*dev);
  i += 2;
  // The rest of the line: "[0000:04:00] NVIDIA H100 80GB HBM3" (t[] are views into body).
  rest = Trim(body.substr(static_cast<size_t>(t[i - 1].data() + t[i - 1].size() - body.data())));
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close != npos) {
      pr.bus_id = Text(rest.substr(1, close - 1), 32);
      rest = Trim(rest.substr(close + 1));
    }
  }
  pr.gpu_name = Text(rest);
  pr.line_no = line_no_;
  found_ = true;
  if (ranks_seen_.count(pr.rank)) return true;  // a repeated header (a second run): first wins
  if (r_.devices.size() >= kMaxPerfRanks) {
    if (!ranks_capped_) Warn(At() + "more than " + std::to_string(kMaxPerfRanks) + " ranks");
    ranks_capped_ = true;
    return true;
  }
  ranks_seen_.insert(pr.rank);
  r_.devices.push_back(std::move(pr));
  return true;
}

void Parser::ParamLine(const std::vector<sv>& toks) {
  auto after = [&](sv key) -> std::optional<uint64_t> {
    for (size_t i = 0; i + 1 < toks.size(); ++i)
      if (toks[i] == key) return ParseU64(toks[i + 1]);
    return std::nullopt;
  };
  auto small = [](std::optional<uint64_t> v) -> std::optional<int> {
    if (!v || *v > static_cast<uint64_t>(kMaxSaneRank)) return std::nullopt;
    return static_cast<int>(*v);
  };
  r_.n_threads = small(after("nThread"));
  r_.n_gpus = small(after("nGpus"));
  r_.min_bytes = after("minBytes");
  r_.max_bytes = after("maxBytes");
  found_ = true;
}

void Parser::Comment(sv body) {
  const std::string collapsed = CollapseBlanks(body);
  const sv b = collapsed;
  if (StartsWithSv(b, "Rank ")) {
    if (RankLine(b)) return;
  }
  if (StartsWithSv(b, "nccl-tests version ")) {
    found_ = true;
    auto t = Tokens(b.substr(19), 8);
    if (t && !t->empty() && !r_.nccl_tests_version) r_.nccl_tests_version = Text((*t)[0], 32);
    if (t)
      for (sv tok : *t)
        if (StartsWithSv(tok, "nccl-library=")) {
          auto code = ParseI64(tok.substr(13));
          if (code && *code > 0 && *code < 1'000'000) {
            r_.nccl_library_code = static_cast<int>(*code);
            r_.nccl_version = VersionFromCode(static_cast<int>(*code));
          }
        }
    return;
  }
  for (sv key : {sv("Collective test starting:"), sv("Collective test concluded:")}) {
    if (!StartsWithSv(b, key)) continue;
    found_ = true;
    auto t = Tokens(b.substr(key.size()), 4);
    if (!t || t->empty()) return;
    std::string name = PerfBinary((*t)[0]);
    if (name.empty()) return;
    if (!r_.rows.empty() && !r_.collective.empty() && name != r_.collective && !rows_closed_) {
      rows_closed_ = true;
      Warn(At() + "a second run (" + name + ") after the rows of " + r_.collective +
           "; only the first run is read");
    }
    SetCollective(std::move(name), CollectiveSource::kStartLine);
    return;
  }
  if (StartsWithSv(b, "nThread ")) {
    if (auto t = Tokens(b, 40)) ParamLine(*t);
    return;
  }
  if (StartsWithSv(b, "Using devices")) {
    found_ = true;
    return;
  }
  if (StartsWithSv(b, "Out of bounds values")) {
    found_ = true;
    const size_t colon = b.find(':');
    if (colon == npos) return;
    auto t = Tokens(b.substr(colon + 1), 4);
    if (t && !t->empty())
      if (auto v = ParseI64((*t)[0]); v && *v >= 0) r_.out_of_bounds = v;
    return;
  }
  if (StartsWithSv(b, "Avg bus bandwidth")) {
    found_ = true;
    const size_t colon = b.find(':');
    if (colon == npos) return;
    auto t = Tokens(b.substr(colon + 1), 4);
    if (t && !t->empty())
      if (auto v = ParseNumber((*t)[0]); v && *v >= 0) r_.avg_busbw_gbps = v;
    return;
  }
  if (ColumnHeader(b)) {
    found_ = true;
    return;
  }
  // The banner line above the header and the units line below it.
  if (b.find("out-of-place") != npos || (b.find("(B)") != npos && b.find("(GB/s)") != npos))
    found_ = true;
}

bool Parser::TryLayout(const std::vector<sv>& toks, size_t lead, size_t width, PerfRow* row) const {
  const size_t n = toks.size();
  if (n < lead + width) return false;
  const size_t blocks = (n - lead) / width;
  if ((n - lead) % width != 0 || blocks < 1 || blocks > 2) return false;
  if (lead == 5) {
    auto root = ParseI64(toks[4]);
    if (!root || *root < -1 || *root > kMaxSaneRank) return false;
    row->root = static_cast<int>(*root);
  } else {
    row->root.reset();
  }
  PerfResult res[2];
  for (size_t b = 0; b < blocks; ++b) {
    const size_t o = lead + b * width;
    auto time = ParseNumber(toks[o]);
    auto alg = ParseNumber(toks[o + 1]);
    auto bus = ParseNumber(toks[o + 2]);
    if (!time || !alg || !bus || *time < 0 || *alg < 0 || *bus < 0) return false;
    res[b].time_us = *time;
    res[b].algbw_gbps = *alg;
    res[b].busbw_gbps = *bus;
    const sv wrong = toks[o + 3];
    if (wrong != "N/A") {
      // "%6g": a count, in an exponent once it is large ("1.23457e+06"); the old "error"
      // column was a maximum error ("0e+00", "2e-07"): a number, but no count.
      auto w = ParseNumber(wrong);
      if (!w || *w < 0) return false;
      if (!header_old_error_ && *w < 9e18) res[b].wrong = static_cast<int64_t>(std::llround(*w));
    }
    for (size_t k = 4; k < width; ++k)  // per-iteration min/max/p99/cv: numbers, not kept
      if (toks[o + k] != "N/A" && !ParseNumber(toks[o + k])) return false;
  }
  row->out_of_place = res[0];
  if (blocks == 2)
    row->in_place = res[1];
  else
    row->in_place.reset();
  return true;
}

bool Parser::TryRow(sv s) {
  const std::string untagged = UntagRow(s);
  auto parsed = Tokens(untagged, kMaxRowTokens);
  if (!parsed || parsed->size() < 4) return false;
  std::vector<sv>& toks = *parsed;
  auto size = ParseU64(toks[0]);
  auto count = ParseU64(toks[1]);
  if (!size || !count || !IsNameToken(toks[2])) return false;
  // nccl-tests 1.x broadcast and reduce printed a root but no redop column ("float  0  …"):
  // a placeholder redop lines it up with the later layouts.
  const bool no_redop = !IsNameToken(toks[3]);
  if (no_redop) {
    if (!ParseI64(toks[3])) return false;
    toks.insert(toks.begin() + 3, sv("-"));
  }
  // From here on the line is a row's start: one that does not parse is reported.
  found_ = true;
  if (toks.size() >= 2 && IsClockToken(toks.back()) && IsDateToken(toks[toks.size() - 2]))
    toks.resize(toks.size() - 2);  // the -S timestamp column
  PerfRow row;
  row.size_bytes = *size;
  row.count = *count;
  row.type = Text(toks[2], 16);
  row.redop = no_redop ? "" : Text(toks[3], 16);
  row.line_no = line_no_;
  const size_t width = header_per_iter_ ? 8 : 4;
  const size_t preferred = header_has_root_ ? 5 : 4;
  const bool ok = TryLayout(toks, preferred, width, &row) ||
                  TryLayout(toks, 9 - preferred, width, &row) ||
                  (!header_seen_ && (TryLayout(toks, 5, 8, &row) || TryLayout(toks, 4, 8, &row)));
  if (!ok) {
    Warn(At() + "a data row that does not parse: '" + Text(Trim(s), kMaxQuotedBytes) + "'");
    return true;
  }
  AddRow(std::move(row));
  return true;
}

void Parser::AddRow(PerfRow row) {
  if (rows_closed_) return;
  if (sizes_.count(row.size_bytes)) {
    if (duplicate_rows_++ == 0)
      Warn(At() + "size " + std::to_string(row.size_bytes) +
           " seen before (a repeated run?); the first row of each size is kept");
    return;
  }
  if (r_.rows.size() >= kMaxPerfRows) {
    if (!rows_capped_)
      Warn(At() + "more than " + std::to_string(kMaxPerfRows) + " rows; rest ignored");
    rows_capped_ = true;
    return;
  }
  sizes_.insert(row.size_bytes);
  r_.rows.push_back(std::move(row));
}

void Parser::NotComment(sv s, sv raw) {
  if (TryRow(s)) return;
  if (ColumnHeader(s)) {  // a header whose "#" was cut off with the start of the line
    found_ = true;
    return;
  }
  if (!r_.nccl_version) {
    if (auto v = ParseNcclVersionLine(raw)) {
      const size_t plus = v->find('+');
      r_.nccl_version = Text(sv(*v).substr(0, plus), 32);
    }
  }
  // A command line: "NCCL_ALGO=TREE ./all_reduce_perf -g 8 -b 8 -e 128M -f 2", "mpirun … ./x".
  // NCCL_DEBUG lines are long and never name a binary; only the first tokens are looked at.
  if (r_.collective_source != CollectiveSource::kStartLine &&
      r_.collective_source != CollectiveSource::kCommandLine) {
    sv rest = s;
    for (int i = 0; i < 24 && !rest.empty(); ++i) {
      rest = TrimLeft(rest);
      const size_t e = std::min(rest.find_first_of(" \t"), rest.size());
      std::string name = PerfBinary(rest.substr(0, e));
      rest.remove_prefix(e);
      if (!name.empty()) {
        found_ = true;
        SetCollective(std::move(name), CollectiveSource::kCommandLine);
        break;
      }
    }
  }
}

// A reduction with root -1 whose count is the whole buffer is all_reduce; one whose count is a
// rank's share is reduce_scatter; one with a root is reduce. Collectives without a reduction
// (all_gather, alltoall, broadcast, gather, scatter, sendrecv) cannot be told apart by their
// rows, so they stay unknown.
void Parser::InferCollective() {
  if (!r_.collective.empty() || r_.rows.empty()) return;
  std::string guess;
  for (const auto& row : r_.rows) {
    if (row.size_bytes == 0) continue;
    auto tb = PerfTypeBytes(row.type);
    if (!tb || row.redop == "none" || row.redop.empty()) return;
    const uint64_t elems = row.size_bytes / static_cast<uint64_t>(*tb);
    std::string g;
    const int root = row.root.value_or(-1);
    if (row.count == elems && root == -1)
      g = "all_reduce_perf";
    else if (row.count == elems && root >= 0)
      g = "reduce_perf";
    else if (root == -1 && row.count > 0 && row.count < elems && elems % row.count == 0 &&
             (!r_.ranks || static_cast<uint64_t>(*r_.ranks) == elems / row.count))
      g = "reduce_scatter_perf";
    else
      return;
    if (!guess.empty() && g != guess) return;
    guess = g;
  }
  // One rank: reduce_scatter's share is the whole buffer, so it would read as all_reduce.
  if (guess.empty() || (r_.ranks && *r_.ranks == 1)) return;
  SetCollective(guess, CollectiveSource::kInferred);
}

void Parser::Finish() {
  std::set<std::string> hosts;
  std::vector<std::string> names;
  for (const auto& d : r_.devices) {
    hosts.insert(d.host);
    if (!d.gpu_name.empty() && std::find(names.begin(), names.end(), d.gpu_name) == names.end() &&
        names.size() < 8)
      names.push_back(d.gpu_name);
  }
  if (!r_.devices.empty()) {
    int max_rank = 0;
    for (const auto& d : r_.devices) max_rank = std::max(max_rank, d.rank);
    // A cut "# Using devices" list still says how many ranks there were at least.
    r_.ranks = std::max(static_cast<int>(r_.devices.size()), max_rank + 1);
    if (*r_.ranks != static_cast<int>(r_.devices.size()))
      Warn("the rank lines list " + std::to_string(r_.devices.size()) + " ranks, up to rank " +
           std::to_string(max_rank) + ": some lines are missing");
    r_.hosts.assign(hosts.begin(), hosts.end());
    r_.nodes = static_cast<int>(hosts.size());
  }
  for (size_t i = 0; i < names.size(); ++i) r_.gpu_model += (i ? " + " : "") + names[i];
  InferCollective();
  if (r_.rows.empty())
    Warn(header_seen_ ? "no data rows: the table ends after its column header (a cut capture?)"
                      : "no data rows");
  size_t wrong_rows = 0;
  for (const auto& row : r_.rows)
    for (const auto* res : {&row.out_of_place, &row.in_place})
      if (*res && (*res)->wrong.value_or(0) > 0) {
        ++wrong_rows;
        break;
      }
  if (wrong_rows > 0)
    Warn(std::to_string(wrong_rows) +
         " rows report wrong elements (#wrong > 0): those results "
         "are not valid");
  if (r_.out_of_bounds.value_or(0) > 0)
    Warn("# Out of bounds values: " + std::to_string(*r_.out_of_bounds) + " (FAILED)");
  if (warnings_dropped_ > 0)
    r_.warnings.push_back("and " + std::to_string(warnings_dropped_) + " more warnings");
}

Result<PerfReport> Parser::Run(sv text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == npos) end = text.size();
    sv raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no_;
    if (raw.size() > kMaxPerfLineBytes) {
      raw = raw.substr(0, kMaxPerfLineBytes);
      ++r_.lines_truncated;
    }
    const sv s = TrimRight(StripPrefixes(raw));
    if (s.empty()) continue;
    if (first_text_line_ == 0) {
      first_text_line_ = line_no_;
      first_text_ = Text(s, kMaxQuotedBytes);
    }
    if (s[0] == '#')
      Comment(s.substr(1));
    else
      NotComment(s, raw);
  }
  r_.lines = line_no_;
  if (!found_) {
    if (first_text_line_ == 0) return Status::InvalidArgument("nccl-tests output: empty input");
    return Status::InvalidArgument(
        "nccl-tests output: no perf table, column header, '# Using devices' rank line or "
        "'# nThread' line in " +
        std::to_string(line_no_) + " lines; line " + std::to_string(first_text_line_) + " is '" +
        first_text_ + "'");
  }
  Finish();
  return std::move(r_);
}

}  // namespace

std::string_view CollectiveSourceName(CollectiveSource s) {
  switch (s) {
    case CollectiveSource::kNone:
      return "none";
    case CollectiveSource::kStartLine:
      return "start_line";
    case CollectiveSource::kCommandLine:
      return "command_line";
    case CollectiveSource::kInferred:
      return "inferred";
  }
  return "none";
}

std::optional<int> PerfTypeBytes(std::string_view type) {
  static const std::map<std::string_view, int> kBytes = {
      {"int8", 1},  {"uint8", 1},    {"char", 1},   {"f8e4m3", 1}, {"f8e5m2", 1},
      {"half", 2},  {"bfloat16", 2}, {"int32", 4},  {"uint32", 4}, {"int", 4},
      {"float", 4}, {"int64", 8},    {"uint64", 8}, {"double", 8}};
  auto it = kBytes.find(type);
  if (it == kBytes.end()) return std::nullopt;
  return it->second;
}

const PerfRow* PerfReport::FindRow(uint64_t size_bytes) const {
  for (const auto& row : rows)
    if (row.size_bytes == size_bytes) return &row;
  return nullptr;
}

std::optional<double> PerfReport::PeakBusbwGbps() const {
  std::optional<double> peak;
  for (const auto& row : rows) {
    const auto& res = row.out_of_place ? row.out_of_place : row.in_place;
    if (res && (!peak || res->busbw_gbps > *peak)) peak = res->busbw_gbps;
  }
  return peak;
}

Result<PerfReport> ParseNcclTestsOutput(std::string_view text) { return Parser().Run(text); }

}  // namespace gpuwatch::nccl
