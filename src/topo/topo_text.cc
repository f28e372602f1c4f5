#include "topo/topo_text.h"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/strings.h"

namespace gpuwatch::topo {

namespace {

// Bounds that keep work and memory linear in the input whatever it holds. Real nodes have at
// most 16 GPUs and a few dozen NICs.
constexpr size_t kMaxGpus = 128;
constexpr size_t kMaxNics = 128;
constexpr size_t kMaxTokensPerLine = 1024;  // more than any real header (GPUs + NICs + 3 labels)
constexpr size_t kMaxWarnings = 64;
constexpr size_t kExcerptBytes = 48;
constexpr size_t kMaxNamesListed = 8;

constexpr std::string_view kNa = "N/A";

constexpr std::string_view kLegend =
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
    "(e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
    "within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host "
    "Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n";

// A short printable quote of input text for a message: the input may be megabytes of anything.
std::string Excerpt(std::string_view s) {
  std::string out = PrintableText(s.substr(0, kExcerptBytes));
  if (s.size() > kExcerptBytes) out += "...";
  return out;
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

bool IsGpuLabel(std::string_view s) {
  return s.size() > 3 && s.substr(0, 3) == "GPU" && AllDigits(s.substr(3));
}
bool IsNicLabel(std::string_view s) {
  return s.size() > 3 && s.substr(0, 3) == "NIC" && AllDigits(s.substr(3));
}
bool IsLinkToken(std::string_view s) { return ClassifyLink(s) != LinkLevel::kUnknown; }

// Copies `raw` without ANSI escape sequences (CSI "ESC [ … final", OSC "ESC ] … BEL", and
// two-byte escapes): colour codes appear when the output went through a terminal recorder.
void StripEscapes(std::string_view raw, std::string* out) {
  out->clear();
  const size_t n = raw.size();
  for (size_t i = 0; i < n;) {
    if (raw[i] != '\x1b') {
      out->push_back(raw[i++]);
      continue;
    }
    ++i;
    if (i >= n) break;
    if (raw[i] == '[') {
      ++i;
      while (i < n && raw[i] >= 0x20 && raw[i] <= 0x3f) ++i;
      if (i < n && raw[i] >= 0x40 && raw[i] <= 0x7e) ++i;
    } else if (raw[i] == ']') {
      ++i;
      while (i < n && raw[i] != '\a' && raw[i] != '\x1b') ++i;
      if (i < n && raw[i] == '\a') ++i;
    } else {
      ++i;
    }
  }
}

// Splits on blanks (space, TAB, CR, VT, FF and the UTF-8 no-break space that web pages put in
// pasted tables), so empty TAB fields vanish. Leading tokens made only of '>' (markdown quote
// markers) are dropped. Keeps at most kMaxTokensPerLine tokens; returns the total count.
size_t Tokenize(std::string_view line, std::vector<std::string_view>* tokens) {
  tokens->clear();
  size_t total = 0;
  const size_t n = line.size();
  size_t i = 0;
  auto blank_at = [&](size_t k) -> size_t {  // length of the blank at k, 0 if none
    const char c = line[k];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') return 1;
    if (c == '\xc2' && k + 1 < n && line[k + 1] == '\xa0') return 2;
    return 0;
  };
  bool leading = true;
  while (i < n) {
    if (size_t b = blank_at(i)) {
      i += b;
      continue;
    }
    const size_t start = i;
    while (i < n && blank_at(i) == 0) ++i;
    const std::string_view tok = line.substr(start, i - start);
    if (leading && tok.find_first_not_of('>') == std::string_view::npos) continue;
    leading = false;
    ++total;
    if (tokens->size() < kMaxTokensPerLine) tokens->push_back(tok);
  }
  return total;
}

enum class ColKind { kGpu, kNic, kCpuAffinity, kNumaAffinity, kGpuNumaId, kIgnored };

struct Column {
  ColKind kind;
  size_t index;  // into the GPUs or the NICs
};

struct RowRef {
  bool is_gpu;
  size_t index;
};

class Parser {
 public:
  Result<Topology> Run(std::string_view text);

 private:
  enum class State { kSeekHeader, kRows, kAfterTable, kNicLegend };

  void Warn(std::string message) {
    if (t_.warnings.size() < kMaxWarnings)
      t_.warnings.push_back(std::move(message));
    else
      ++suppressed_;
  }
  // Header columns, when `tokens` is a header. Fills columns_ and sizes the topology.
  bool TryHeader(const std::vector<std::string_view>& tokens, size_t total_tokens);
  void Row(const RowRef& ref, const std::vector<std::string_view>& tokens, size_t total_tokens);
  void LinkCell(std::string_view row_label, bool self, std::string_view col_label,
                std::string_view v, bool* x_warned, std::optional<std::string>* dst);
  void Finish();
  std::string RowLabel(size_t k) const {  // k over GPUs then NICs, as the rows are printed
    return k < gpu_labels_.size() ? gpu_labels_[k] : nic_labels_[k - gpu_labels_.size()];
  }

  Topology t_;
  std::vector<Column> columns_;
  std::vector<std::string> gpu_labels_, nic_labels_;
  std::unordered_map<std::string, RowRef> rows_;
  std::vector<bool> gpu_row_seen_, nic_row_seen_;
  // NIC rows' GPU cells (NIC×GPU): they fill GPU×NIC cells whose GPU row was not printed.
  std::vector<std::vector<std::optional<std::string>>> nic_gpu_cells_;
  std::unordered_map<std::string, std::string> legend_;
  size_t suppressed_ = 0;
};

bool Parser::TryHeader(const std::vector<std::string_view>& tokens, size_t total_tokens) {
  if (tokens.empty() || !IsGpuLabel(tokens[0])) return false;
  for (std::string_view tok : tokens)
    if (IsLinkToken(tok)) return false;

  std::vector<Column> cols;
  std::vector<std::string> gpus, nics;
  std::unordered_map<std::string, RowRef> labels;
  std::vector<std::string> notes;
  bool affinity_seen = false, capped = false;
  bool seen_cpu = false, seen_numa = false, seen_gpu_numa = false;
  auto next_is = [&](size_t i, std::string_view w) { return i < tokens.size() && tokens[i] == w; };
  for (size_t i = 0; i < tokens.size();) {
    const std::string_view tok = tokens[i];
    auto label_once = [&](bool* seen, ColKind kind, size_t width) {
      cols.push_back({*seen ? ColKind::kIgnored : kind, 0});
      if (*seen) notes.push_back("duplicate column '" + Excerpt(tok) + "' (ignored)");
      *seen = affinity_seen = true;
      i += width;
    };
    if (tok == "CPU" && next_is(i + 1, "Affinity")) {
      label_once(&seen_cpu, ColKind::kCpuAffinity, 2);
    } else if (tok == "NUMA" && next_is(i + 1, "Affinity")) {
      label_once(&seen_numa, ColKind::kNumaAffinity, 2);
    } else if (tok == "GPU" && next_is(i + 1, "NUMA") && next_is(i + 2, "ID")) {
      label_once(&seen_gpu_numa, ColKind::kGpuNumaId, 3);
    } else {
      const bool gpu = IsGpuLabel(tok);
      std::vector<std::string>& list = gpu ? gpus : nics;
      const std::string label(tok);
      if (!gpu && affinity_seen) {
        cols.push_back({ColKind::kIgnored, 0});
        notes.push_back("unknown column '" + Excerpt(tok) + "' (ignored)");
      } else if (labels.count(label)) {
        cols.push_back({ColKind::kIgnored, 0});
        notes.push_back("duplicate column '" + Excerpt(tok) + "' (ignored)");
      } else if (list.size() >= (gpu ? kMaxGpus : kMaxNics)) {
        cols.push_back({ColKind::kIgnored, 0});
        capped = true;
      } else {
        labels.emplace(label, RowRef{gpu, list.size()});
        cols.push_back({gpu ? ColKind::kGpu : ColKind::kNic, list.size()});
        list.push_back(label);
      }
      ++i;
    }
  }
  // "GPU0 is fine" is prose, not a header: a header has two GPUs or an affinity column.
  if (gpus.size() < 2 && !affinity_seen) return false;

  for (auto& note : notes) Warn(std::move(note));
  if (capped || total_tokens > tokens.size())
    Warn("header has more columns than the " + std::to_string(kMaxGpus) + " GPUs and " +
         std::to_string(kMaxNics) + " NICs kept; the rest are ignored");
  columns_ = std::move(cols);
  gpu_labels_ = std::move(gpus);
  nic_labels_ = std::move(nics);
  rows_ = std::move(labels);
  const size_t n = gpu_labels_.size(), m = nic_labels_.size();
  t_.gpu_names = gpu_labels_;
  t_.gpu_links.assign(n, std::vector<std::string>(n));
  t_.gpu_nic_links.assign(n, std::vector<std::optional<std::string>>(m));
  t_.nic_links.assign(m, std::vector<std::optional<std::string>>(m));
  t_.cpu_affinity.assign(n, std::nullopt);
  t_.numa_affinity.assign(n, std::nullopt);
  t_.numa_affinity_text.assign(n, std::nullopt);
  t_.gpu_numa_id.assign(n, std::nullopt);
  gpu_row_seen_.assign(n, false);
  nic_row_seen_.assign(m, false);
  nic_gpu_cells_.assign(m, std::vector<std::optional<std::string>>(n));
  return true;
}

void Parser::LinkCell(std::string_view row_label, bool self, std::string_view col_label,
                      std::string_view v, bool* x_warned, std::optional<std::string>* dst) {
  if (v == kNa) return;  // absent
  *dst = std::string(v);
  if (!IsLinkToken(v)) {
    Warn("unknown link '" + Excerpt(v) + "' at " + std::string(row_label) + "/" +
         std::string(col_label) + " (kept as printed)");
  } else if ((v == "X") != self && !*x_warned) {
    *x_warned = true;
    Warn("row " + std::string(row_label) + ": '" + std::string(v) + "' in column " +
         std::string(col_label) + " (X belongs on the diagonal; cells may be shifted)");
  }
}

void Parser::Row(const RowRef& ref, const std::vector<std::string_view>& tokens,
                 size_t total_tokens) {
  const std::string& label = ref.is_gpu ? gpu_labels_[ref.index] : nic_labels_[ref.index];
  std::vector<bool>& seen = ref.is_gpu ? gpu_row_seen_ : nic_row_seen_;
  if (seen[ref.index]) {
    Warn("duplicate row " + label + " (ignored)");
    return;
  }
  seen[ref.index] = true;
  const size_t i = ref.index;
  const size_t cells = std::min(tokens.size() - 1, columns_.size());
  // A NIC row has no affinity cells; a GPU row has a cell for every column.
  size_t expected = columns_.size();
  if (!ref.is_gpu) {
    expected = 0;
    for (size_t k = 0; k < columns_.size(); ++k)
      if (columns_[k].kind == ColKind::kGpu || columns_[k].kind == ColKind::kNic) expected = k + 1;
  }
  bool x_warned = false;
  for (size_t k = 0; k < cells; ++k) {
    const Column& c = columns_[k];
    const std::string_view v = tokens[k + 1];
    switch (c.kind) {
      case ColKind::kGpu: {
        const bool self = ref.is_gpu && c.index == i;
        std::optional<std::string> cell;
        LinkCell(label, self, gpu_labels_[c.index], v, &x_warned, &cell);
        if (!cell) break;
        if (ref.is_gpu)
          t_.gpu_links[i][c.index] = std::move(*cell);
        else
          nic_gpu_cells_[i][c.index] = std::move(cell);
        break;
      }
      case ColKind::kNic: {
        const bool self = !ref.is_gpu && c.index == i;
        auto& dst = ref.is_gpu ? t_.gpu_nic_links[i][c.index] : t_.nic_links[i][c.index];
        LinkCell(label, self, nic_labels_[c.index], v, &x_warned, &dst);
        break;
      }
      case ColKind::kCpuAffinity:
        if (ref.is_gpu && v != kNa) t_.cpu_affinity[i] = std::string(v);
        break;
      case ColKind::kNumaAffinity:
        if (!ref.is_gpu || v == kNa) break;
        if (auto node = ParseInt<int>(v))
          t_.numa_affinity[i] = *node;
        else
          t_.numa_affinity_text[i] = std::string(v);
        break;
      case ColKind::kGpuNumaId:
        if (!ref.is_gpu || v == kNa) break;
        if (auto id = ParseInt<int>(v))
          t_.gpu_numa_id[i] = *id;
        else
          Warn("GPU NUMA ID '" + Excerpt(v) + "' of " + label + " is not a number (ignored)");
        break;
      case ColKind::kIgnored:
        break;
    }
  }
  const size_t given = total_tokens - 1;
  if (given < expected) {
    Warn("row " + label + " cut after " + std::to_string(given) + " of " +
         std::to_string(expected) + " cells");
  } else if (given > columns_.size()) {
    Warn("row " + label + " has " + std::to_string(given - columns_.size()) +
         " cells past the last column (ignored)");
  }
}

void Parser::Finish() {
  const size_t n = gpu_labels_.size(), m = nic_labels_.size();
  // NIC names from the legend.
  std::vector<std::string> unnamed;
  t_.nic_names.clear();
  for (const std::string& label : nic_labels_) {
    auto it = legend_.find(label);
    t_.nic_names.push_back(it != legend_.end() ? it->second : label);
    if (it == legend_.end() && IsNicLabel(label)) unnamed.push_back(label);
  }
  // NIC rows: their GPU cells are the GPU×NIC cells seen from the other side.
  for (size_t j = 0; j < m; ++j) {
    for (size_t g = 0; g < n; ++g) {
      const auto& from_nic = nic_gpu_cells_[j][g];
      auto& cell = t_.gpu_nic_links[g][j];
      if (!from_nic) continue;
      if (!cell) {
        cell = from_nic;
      } else if (*cell != *from_nic) {
        Warn(gpu_labels_[g] + "/" + nic_labels_[j] + " is '" + Excerpt(*cell) + "' but " +
             nic_labels_[j] + "/" + gpu_labels_[g] + " is '" + Excerpt(*from_nic) + "'");
      }
    }
  }
  // Missing rows, in printed order (GPU rows, then NIC rows).
  const size_t total = n + m;
  auto present = [&](size_t k) { return k < n ? gpu_row_seen_[k] : nic_row_seen_[k - n]; };
  size_t last_present = total, missing = 0;
  for (size_t k = 0; k < total; ++k) {
    if (present(k))
      last_present = k;
    else
      ++missing;
  }
  if (missing > 0) {
    if (last_present == total) {
      Warn("table cut after the header (no rows)");
    } else if (missing == total - 1 - last_present) {
      std::string w = "table cut after " + RowLabel(last_present) + " row (missing row";
      w += missing == 1 ? " " + RowLabel(last_present + 1)
                        : "s " + RowLabel(last_present + 1) + ".." + RowLabel(total - 1);
      Warn(w + ")");
    } else {
      std::string w = "missing rows:";
      size_t listed = 0;
      for (size_t k = 0; k < total && listed <= kMaxNamesListed; ++k) {
        if (present(k)) continue;
        w += listed++ == kMaxNamesListed ? " ..." : " " + RowLabel(k);
      }
      Warn(w);
    }
  }
  if (!unnamed.empty()) {
    if (unnamed.size() == m) {
      Warn("no NIC Legend: NIC names are the column labels " + unnamed.front() +
           (m > 1 ? ".." + unnamed.back() : ""));
    } else {
      std::string w = "no NIC Legend entry for";
      for (size_t k = 0; k < unnamed.size() && k <= kMaxNamesListed; ++k)
        w += k == kMaxNamesListed ? " ..." : " " + unnamed[k];
      Warn(w);
    }
  }
  if (suppressed_ > 0)
    t_.warnings.push_back("and " + std::to_string(suppressed_) + " more warnings");
}

Result<Topology> Parser::Run(std::string_view text) {
  State state = State::kSeekHeader;
  std::string line;
  std::vector<std::string_view> tokens;
  size_t line_no = 0;
  size_t first_text_line = 0, first_row_line = 0;
  std::string first_text, first_row;
  bool second_matrix_warned = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    StripEscapes(raw, &line);
    const size_t total_tokens = Tokenize(line, &tokens);

    switch (state) {
      case State::kSeekHeader:
        if (tokens.empty()) break;
        if (TryHeader(tokens, total_tokens)) {
          state = State::kRows;
          break;
        }
        if (first_text_line == 0) {
          first_text_line = line_no;
          first_text = Excerpt(line);
        }
        if (first_row_line == 0 && tokens.size() > 1 && IsGpuLabel(tokens[0]) &&
            IsLinkToken(tokens[1])) {
          first_row_line = line_no;
          first_row = Excerpt(line);
        }
        break;
      case State::kRows: {
        if (tokens.empty()) break;  // blank lines inside a pasted table
        auto it = rows_.find(std::string(tokens[0]));
        if (it != rows_.end()) {
          Row(it->second, tokens, total_tokens);
          break;
        }
        if ((IsGpuLabel(tokens[0]) || IsNicLabel(tokens[0])) && tokens.size() > 1 &&
            IsLinkToken(tokens[1])) {
          Warn("row " + Excerpt(tokens[0]) + " at line " + std::to_string(line_no) +
               " has no column in the header (ignored)");
          break;
        }
        state = State::kAfterTable;
        [[fallthrough]];
      }
      case State::kAfterTable:
      case State::kNicLegend:
        if (tokens.size() == 2 && tokens[0] == "NIC" && tokens[1] == "Legend:") {
          state = State::kNicLegend;
        } else if (state == State::kNicLegend && tokens.size() == 2 && tokens[0].size() > 1 &&
                   tokens[0].back() == ':') {
          const std::string label(tokens[0].substr(0, tokens[0].size() - 1));
          auto row = rows_.find(label);
          if (row != rows_.end() && !row->second.is_gpu) legend_[label] = std::string(tokens[1]);
        } else if (!tokens.empty()) {
          if (state == State::kNicLegend) state = State::kAfterTable;
          if (!second_matrix_warned && IsGpuLabel(tokens[0])) {
            bool header = true;
            for (std::string_view tok : tokens) header = header && !IsLinkToken(tok);
            if (header) {
              second_matrix_warned = true;
              Warn("a second matrix at line " + std::to_string(line_no) + " ignored");
            }
          }
        }
        break;
    }
  }

  if (state == State::kSeekHeader) {
    if (first_text_line == 0) return Status::InvalidArgument("nvidia-smi topo -m: empty input");
    if (first_row_line != 0)
      return Status::InvalidArgument(
          "nvidia-smi topo -m: line " + std::to_string(first_row_line) + " ('" + first_row +
          "') is a matrix row but no header line (GPU0 GPU1 ... CPU Affinity) comes before it");
    return Status::InvalidArgument(
        "nvidia-smi topo -m: no matrix header (a line of column labels starting with GPU0) in " +
        std::to_string(line_no) + " lines; line " + std::to_string(first_text_line) + " is '" +
        first_text + "'");
  }
  Finish();
  return std::move(t_);
}

// Cell accessors that tolerate a hand-built Topology with ragged vectors.
template <typename T>
const T* At(const std::vector<T>& v, size_t i) {
  return i < v.size() ? &v[i] : nullptr;
}

std::string_view LinkOrNa(std::string_view v) {
  if (v.empty()) return kNa;
  return v == "X" ? std::string_view(" X ") : v;
}

std::string GpuLinkAt(const Topology& t, size_t i, size_t j) {
  const auto* row = At(t.gpu_links, i);
  const auto* cell = row ? At(*row, j) : nullptr;
  return cell ? *cell : std::string();
}

std::optional<std::string> OptAt(const std::vector<std::vector<std::optional<std::string>>>& m,
                                 size_t i, size_t j) {
  const auto* row = At(m, i);
  const auto* cell = row ? At(*row, j) : nullptr;
  return cell ? *cell : std::nullopt;
}

template <typename T>
std::optional<T> OptAt(const std::vector<std::optional<T>>& v, size_t i) {
  const auto* cell = At(v, i);
  return cell ? *cell : std::nullopt;
}

std::string NumaText(const Topology& t, size_t i) {
  if (auto node = OptAt(t.numa_affinity, i)) return std::to_string(*node);
  if (auto text = OptAt(t.numa_affinity_text, i)) return *text;
  return std::string();
}

std::string NicLabel(size_t j) { return "NIC" + std::to_string(j); }

}  // namespace

Result<Topology> ParseTopoMatrix(std::string_view text) { return Parser().Run(text); }

std::string RenderTopoMatrix(const Topology& t) {
  const size_t n = t.gpu_names.size(), m = t.nic_names.size();
  std::string out;
  for (size_t g = 0; g < n; ++g) out += "\t" + t.gpu_names[g];
  for (size_t j = 0; j < m; ++j) out += "\t" + NicLabel(j);
  out += "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n";

  auto cell = [&](std::string_view v) {
    out += '\t';
    out += LinkOrNa(v);
  };
  for (size_t i = 0; i < n; ++i) {
    const auto cpu = OptAt(t.cpu_affinity, i);
    const auto numa_id = OptAt(t.gpu_numa_id, i);
    const std::string numa = NumaText(t, i);
    bool printed = cpu || numa_id || !numa.empty();
    for (size_t g = 0; g < n && !printed; ++g) printed = !GpuLinkAt(t, i, g).empty();
    for (size_t j = 0; j < m && !printed; ++j) printed = OptAt(t.gpu_nic_links, i, j).has_value();
    if (!printed) continue;  // a row that was not printed stays out
    out += t.gpu_names[i];
    for (size_t g = 0; g < n; ++g) cell(GpuLinkAt(t, i, g));
    for (size_t j = 0; j < m; ++j) cell(OptAt(t.gpu_nic_links, i, j).value_or(""));
    out += "\t" + cpu.value_or(std::string(kNa));
    out += "\t" + (numa.empty() ? std::string(kNa) : numa);
    out += "\t" + (numa_id ? std::to_string(*numa_id) : std::string(kNa));
    out += '\n';
  }
  for (size_t j = 0; j < m; ++j) {
    bool printed = false;
    for (size_t k = 0; k < m && !printed; ++k) printed = OptAt(t.nic_links, j, k).has_value();
    if (!printed) continue;
    out += NicLabel(j);
    for (size_t g = 0; g < n; ++g) cell(OptAt(t.gpu_nic_links, g, j).value_or(""));
    for (size_t k = 0; k < m; ++k) cell(OptAt(t.nic_links, j, k).value_or(""));
    out += '\n';
  }

  out += "\nLegend:\n\n";
  out += kLegend;
  bool named = false;
  for (size_t j = 0; j < m; ++j) named = named || t.nic_names[j] != NicLabel(j);
  if (named) {
    out += "\nNIC Legend:\n\n";
    for (size_t j = 0; j < m; ++j) out += "  " + NicLabel(j) + ": " + t.nic_names[j] + "\n";
  }
  return out;
}

nlohmann::json TopoImportJson(const Topology& t) {
  using nlohmann::json;
  const size_t n = t.gpu_names.size(), m = t.nic_names.size();
  auto str = [](const std::optional<std::string>& v) -> json {
    return v ? json(SanitizeUtf8(*v)) : json(nullptr);
  };
  json links = json::array(), gpu_nic = json::array(), nics = json::array();
  json cpu = json::array(), numa = json::array();
  for (size_t i = 0; i < n; ++i) {
    json row = json::array();
    for (size_t g = 0; g < n; ++g) {
      const std::string v = GpuLinkAt(t, i, g);
      row.push_back(v.empty() ? json(nullptr) : json(SanitizeUtf8(v)));
    }
    links.push_back(std::move(row));
    json nic_row = json::array();
    for (size_t j = 0; j < m; ++j) nic_row.push_back(str(OptAt(t.gpu_nic_links, i, j)));
    gpu_nic.push_back(std::move(nic_row));
    cpu.push_back(str(OptAt(t.cpu_affinity, i)));
    if (auto node = OptAt(t.numa_affinity, i))
      numa.push_back(*node);
    else
      numa.push_back(str(OptAt(t.numa_affinity_text, i)));
  }
  for (const std::string& name : t.nic_names) nics.push_back(SanitizeUtf8(name));
  return json{{"gpus", n},
              {"links", std::move(links)},
              {"nics", std::move(nics)},
              {"gpu_nic_links", std::move(gpu_nic)},
              {"cpu_affinity", std::move(cpu)},
              {"numa_affinity", std::move(numa)}};
}

}  // namespace gpuwatch::topo
