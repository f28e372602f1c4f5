#include "analyze/baseline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>

#include "common/file_io.h"
#include "common/strings.h"

namespace gpuwatch::analyze {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr double kBucketS = 10;

double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

struct Acc {
  double sum = 0;
  size_t n = 0;
  void Add(double v) {
    sum += v;
    ++n;
  }
  double Mean() const { return n ? sum / static_cast<double>(n) : 0; }
};

struct GpuMem {
  std::optional<double> first, last, peak;
  uint64_t first_steps = 0, last_steps = 0;
};

struct Run {
  std::string job, template_name, driver, model;
  std::set<std::string> nodes;
  std::map<std::string, std::set<uint32_t>> gpus;  // node → its GPUs in the job
  int gpus_per_node = 0;
  std::map<std::string, uint32_t> lead;        // node → lowest rank seen
  std::map<std::string, uint64_t> node_steps;  // node → its lead steps in the window
  double first_step_t = -1, end_t = -1, last_t = 0, window_from = 0;
  uint64_t steps = 0;  // lead steps in the window
  std::map<std::string, std::vector<double>> values;
  // The open 10-s bucket of card samples.
  int64_t bucket = -1;
  std::map<std::pair<std::string, uint32_t>, Acc> util;
  std::map<std::string, Acc> card;
  std::map<std::pair<std::string, uint32_t>, GpuMem> mem;

  bool InWindow(double t, const RunOptions& o) const {
    if (first_step_t < 0 || (end_t >= 0 && t > end_t)) return false;
    if (t < first_step_t + o.warmup_s) return false;
    return o.window_s <= 0 || t <= first_step_t + o.warmup_s + o.window_s;
  }
  void FlushBucket() {
    if (!util.empty()) {
      Acc all;
      double least = 1e300;
      for (const auto& [gpu, a] : util) {
        all.sum += a.sum;
        all.n += a.n;
        least = std::min(least, a.Mean());
      }
      values["gpu_util_pct"].push_back(all.Mean());
      values["gpu_util_min_pct"].push_back(least);
    }
    for (const auto& [name, a] : card) values[name].push_back(a.Mean());
    util.clear();
    card.clear();
  }
};

void Thin(std::vector<double>* v) {
  // Evenly: every other value once the sample is twice the cap, until it fits.
  while (v->size() > kMaxSample) {
    std::vector<double> kept;
    kept.reserve(v->size() / 2 + 1);
    for (size_t i = 0; i < v->size(); i += 2) kept.push_back((*v)[i]);
    *v = std::move(kept);
  }
}

Result<MetricSummary> SummaryFromJson(const json& j, const std::string& name) {
  auto bad = [&](const char* field) {
    return Status::InvalidArgument(
        fmt::format("metrics.{}.{}: missing or not a number", name, field));
  };
  MetricSummary m;
  if (!j.is_object()) return Status::InvalidArgument("metrics." + name + ": not an object");
  if (!j.contains("n") || !j["n"].is_number_unsigned()) return bad("n");
  m.n = j["n"].get<size_t>();
  const std::pair<const char*, double*> fields[] = {{"mean", &m.mean}, {"median", &m.median},
                                                    {"p95", &m.p95},   {"p99", &m.p99},
                                                    {"min", &m.min},   {"max", &m.max}};
  for (auto [key, out] : fields) {
    if (!j.contains(key) || !j[key].is_number()) return bad(key);
    *out = j[key].get<double>();
  }
  if (j.contains("sample")) {
    if (!j["sample"].is_array() || j["sample"].size() > kMaxSample)
      return Status::InvalidArgument(
          fmt::format("metrics.{}.sample: an array of at most {} numbers", name, kMaxSample));
    for (const json& v : j["sample"]) {
      if (!v.is_number()) return bad("sample[]");
      m.sample.push_back(v.get<double>());
    }
  }
  return m;
}

}  // namespace

MetricSummary Summarize(std::vector<double> values) {
  MetricSummary m;
  std::erase_if(values, [](double v) { return !std::isfinite(v); });
  m.n = values.size();
  if (values.empty()) return m;
  m.sample = values;
  Thin(&m.sample);
  std::vector<double> sorted = std::move(values);
  std::sort(sorted.begin(), sorted.end());
  m.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / static_cast<double>(sorted.size());
  m.median = Quantile(sorted, 0.5);
  m.p95 = Quantile(sorted, 0.95);
  m.p99 = Quantile(sorted, 0.99);
  m.min = sorted.front();
  m.max = sorted.back();
  return m;
}

json BaselineToJson(const Baseline& b) {
  json metrics = json::object();
  for (const auto& [name, m] : b.metrics) {
    metrics[name] = {{"n", m.n},     {"mean", m.mean}, {"median", m.median}, {"p95", m.p95},
                     {"p99", m.p99}, {"min", m.min},   {"max", m.max},       {"sample", m.sample}};
  }
  return {{"format", "gpuwatch-baseline"},
          {"format_version", 1},
          {"template", b.template_name},
          {"shape", b.shape},
          {"job", b.job},
          {"version", b.version},
          {"source", b.source},
          {"learned_at_ms", b.learned_at_ms},
          {"window_from_ms", b.window_from_ms},
          {"window_to_ms", b.window_to_ms},
          {"driver_version", b.driver_version},
          {"metrics", metrics}};
}

Result<Baseline> BaselineFromJson(const json& j) {
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != "gpuwatch-baseline")
    return Status::InvalidArgument("not a gpuwatch baseline (\"format\": \"gpuwatch-baseline\")");
  if (!j.contains("format_version") || !j["format_version"].is_number_integer() ||
      j["format_version"].get<int64_t>() != 1)
    return Status::InvalidArgument("format_version: only 1 is known");
  Baseline b;
  for (auto [key, out] : {std::pair{"template", &b.template_name}, std::pair{"shape", &b.shape},
                          std::pair{"job", &b.job}, std::pair{"source", &b.source},
                          std::pair{"driver_version", &b.driver_version}}) {
    if (!j.contains(key) || !j[key].is_string())
      return Status::InvalidArgument(std::string(key) + ": missing or not a string");
    *out = j[key].get<std::string>();
  }
  if (b.template_name.empty() || b.template_name.size() > 256)
    return Status::InvalidArgument("template: 1 to 256 bytes");
  if (b.shape.empty() || b.shape.size() > 256)
    return Status::InvalidArgument("shape: 1 to 256 bytes");
  for (auto [key, out] : {std::pair{"learned_at_ms", &b.learned_at_ms},
                          std::pair{"window_from_ms", &b.window_from_ms},
                          std::pair{"window_to_ms", &b.window_to_ms}}) {
    if (!j.contains(key) || !j[key].is_number_integer())
      return Status::InvalidArgument(std::string(key) + ": missing or not an integer");
    *out = j[key].get<int64_t>();
  }
  if (j.contains("version") && j["version"].is_number_integer()) b.version = j["version"];
  if (!j.contains("metrics") || !j["metrics"].is_object())
    return Status::InvalidArgument("metrics: missing or not an object");
  for (const auto& [name, m] : j["metrics"].items()) {
    auto s = SummaryFromJson(m, name);
    if (!s.ok()) return s.status();
    b.metrics[name] = std::move(s).value();
  }
  return b;
}

Result<std::vector<Baseline>> LearnRuns(trace::TraceReader* reader, const RunOptions& o) {
  std::map<std::string, Run> runs;
  std::map<std::string, std::pair<std::string, int>> node_info;  // node → (model, GPU count)
  std::map<std::string, std::string> node_driver;
  trace::TraceRecord r;
  while (true) {
    auto more = reader->Next(&r);
    if (!more.ok()) return more.status();
    if (!*more) break;
    const double t = r.t;
    if (const auto* n = r.as<trace::TraceNode>()) {
      if (n->gpus && !n->gpus->empty()) {
        node_info[r.node] = {n->gpus->front().name.value_or("GPU"),
                             static_cast<int>(n->gpus->size())};
      }
      if (n->driver_version) node_driver[r.node] = *n->driver_version;
    } else if (const auto* jb = r.as<trace::TraceJob>(); jb && jb->job) {
      if (!o.job.empty() && *jb->job != o.job) continue;
      Run& run = runs[*jb->job];
      run.job = *jb->job;
      if (jb->state == "start") {
        if (jb->template_name && !jb->template_name->empty())
          run.template_name = *jb->template_name;
        run.nodes.insert(r.node);
        if (jb->gpus) run.gpus[r.node].insert(jb->gpus->begin(), jb->gpus->end());
        if (auto it = node_info.find(r.node); it != node_info.end()) {
          run.model = it->second.first;
          run.gpus_per_node = it->second.second;
        }
        if (run.driver.empty() && node_driver.count(r.node)) run.driver = node_driver[r.node];
      } else if (jb->state == "end") {
        run.end_t = std::max(run.end_t, t);
      }
    } else if (const auto* s = r.as<trace::TraceStep>(); s && s->job && s->duration_s) {
      auto it = runs.find(*s->job);
      if (it == runs.end()) continue;
      Run& run = it->second;
      if (run.first_step_t < 0) run.first_step_t = t;
      const uint32_t rank = s->rank.value_or(0);
      auto [lead, fresh] = run.lead.emplace(r.node, rank);
      if (!fresh && rank < lead->second) lead->second = rank;
      if (rank != lead->second || !run.InWindow(t, o)) continue;
      if (run.steps == 0) run.window_from = t;
      ++run.steps;
      ++run.node_steps[r.node];
      run.last_t = std::max(run.last_t, t);
      const double d = *s->duration_s;
      const double ckpt = s->checkpoint_s.value_or(0);
      if (d - ckpt > 0) run.values["step_s"].push_back(d - ckpt);
      if (ckpt > 0) run.values["checkpoint_s"].push_back(ckpt);
      if (d > 0 && s->data_wait_s) run.values["data_wait_share"].push_back(*s->data_wait_s / d);
      if (d > 0 && s->comm_s) run.values["comm_share"].push_back(*s->comm_s / d);
      if (d > 0 && s->samples) run.values["samples_per_s"].push_back(*s->samples / d);
    } else if (const auto* g = r.as<trace::TraceGpu>(); g && g->gpu && !g->mig) {
      for (auto& [job, run] : runs) {
        auto held = run.gpus.find(r.node);
        if (held == run.gpus.end() || held->second.count(*g->gpu) == 0) continue;
        if (!run.InWindow(t, o)) continue;
        const auto bucket = static_cast<int64_t>(std::floor(t / kBucketS));
        if (bucket != run.bucket) {
          run.FlushBucket();
          run.bucket = bucket;
        }
        run.last_t = std::max(run.last_t, t);
        if (g->util_pct) run.util[{r.node, *g->gpu}].Add(*g->util_pct);
        if (g->sm_active) run.card["sm_active"].Add(*g->sm_active);
        if (g->temp_c) run.card["temp_c"].Add(*g->temp_c);
        if (g->sm_clock_mhz) run.card["sm_clock_mhz"].Add(*g->sm_clock_mhz);
        if (g->power_w) run.card["power_w"].Add(*g->power_w);
        if (g->nvlink_tx_mbs || g->nvlink_rx_mbs)
          run.card["nvlink_mbs"].Add(g->nvlink_tx_mbs.value_or(0) + g->nvlink_rx_mbs.value_or(0));
        if (g->pcie_tx_mbs || g->pcie_rx_mbs)
          run.card["pcie_mbs"].Add(g->pcie_tx_mbs.value_or(0) + g->pcie_rx_mbs.value_or(0));
        if (g->mem_used_mib) {
          GpuMem& m = run.mem[{r.node, *g->gpu}];
          const uint64_t steps = run.node_steps[r.node];
          if (!m.first) {
            m.first = *g->mem_used_mib;
            m.first_steps = steps;
          }
          m.last = *g->mem_used_mib;
          m.last_steps = steps;
          m.peak = std::max(m.peak.value_or(0), *g->mem_used_mib);
        }
      }
    }
  }
  std::vector<Baseline> out;
  for (auto& [job, run] : runs) {
    if (run.first_step_t < 0 || run.steps == 0) continue;  // never got past its warm-up
    run.FlushBucket();
    for (const auto& [gpu, m] : run.mem) {
      if (m.peak) run.values["mem_peak_mib"].push_back(*m.peak);
      if (m.first && m.last && m.last_steps > m.first_steps)
        run.values["mem_growth_mib_per_step"].push_back(
            (*m.last - *m.first) / static_cast<double>(m.last_steps - m.first_steps));
    }
    Baseline b;
    b.job = job;
    b.template_name = run.template_name.empty() ? "job:" + job : run.template_name;
    // GPUs per node: the job's own (its start record's), else the node's.
    size_t per_node = 0;
    for (const auto& [node, gpus] : run.gpus) per_node = std::max(per_node, gpus.size());
    if (per_node == 0) per_node = static_cast<size_t>(run.gpus_per_node);
    b.shape = ShapeName(run.nodes.size(), per_node, run.model);
    b.source = reader->name();
    b.window_from_ms = static_cast<int64_t>(std::llround(run.window_from * 1000));
    b.window_to_ms = static_cast<int64_t>(std::llround(run.last_t * 1000));
    b.learned_at_ms = b.window_to_ms;
    b.driver_version = run.driver;
    for (auto& [name, v] : run.values) b.metrics[name] = Summarize(std::move(v));
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<TemplateStep> CurrentTemplateSteps(const std::vector<Baseline>& all,
                                               int64_t stale_before_ms) {
  std::map<std::pair<std::string, std::string>, const Baseline*> newest;
  for (const Baseline& b : all) {
    auto step = b.metrics.find("step_s");
    if (b.learned_at_ms < stale_before_ms || step == b.metrics.end() || step->second.n == 0)
      continue;
    const Baseline*& have = newest[{b.template_name, b.shape}];
    if (!have || b.version > have->version) have = &b;
  }
  std::vector<TemplateStep> out;
  for (const auto& [key, b] : newest) {
    const MetricSummary& step = b->metrics.at("step_s");
    out.push_back({.template_name = b->template_name,
                   .shape = b->shape,
                   .version = b->version,
                   .driver_version = b->driver_version,
                   .median_s = step.median,
                   .p99_s = step.p99});
  }
  return out;
}

std::string ShapeName(size_t nodes, size_t gpus_per_node, const std::string& model) {
  return fmt::format("{}x{}x{}", nodes, gpus_per_node, model.empty() ? "GPU" : model);
}

double MannWhitneyP(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n1 = a.size(), n2 = b.size();
  if (n1 < 3 || n2 < 3) return 1;
  std::vector<std::pair<double, int>> all;
  all.reserve(n1 + n2);
  for (double v : a) all.emplace_back(v, 0);
  for (double v : b) all.emplace_back(v, 1);
  std::sort(all.begin(), all.end());
  const double n = static_cast<double>(n1 + n2);
  double rank_sum_a = 0, tie_term = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double avg_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    for (size_t k = i; k < j; ++k) {
      if (all[k].second == 0) rank_sum_a += avg_rank;
    }
    i = j;
  }
  const double d1 = static_cast<double>(n1), d2 = static_cast<double>(n2);
  const double u = rank_sum_a - d1 * (d1 + 1) / 2;
  const double mu = d1 * d2 / 2;
  const double var = d1 * d2 / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  if (var <= 0) return 1;  // every value equal
  // Continuity correction toward the mean.
  const double z = (std::fabs(u - mu) - 0.5) / std::sqrt(var);
  return std::clamp(std::erfc(std::max(0.0, z) / std::sqrt(2.0)), 0.0, 1.0);
}

std::vector<MetricShift> CompareBaselines(const Baseline& a, const Baseline& b) {
  std::vector<MetricShift> out;
  for (const auto& [name, ma] : a.metrics) {
    auto it = b.metrics.find(name);
    if (it == b.metrics.end()) continue;
    const MetricSummary& mb = it->second;
    MetricShift s;
    s.metric = name;
    s.n_a = ma.n;
    s.n_b = mb.n;
    s.median_a = ma.median;
    s.median_b = mb.median;
    s.shift = mb.median - ma.median;
    s.shift_pct = ma.median != 0 ? s.shift / std::fabs(ma.median) * 100 : 0;
    s.p_value = MannWhitneyP(ma.sample, mb.sample);
    // From a zero median any move is more than 2 %: judge it by the test alone.
    s.significant =
        s.p_value < 0.01 && (ma.median == 0 ? s.shift != 0 : std::fabs(s.shift_pct) > 2);
    out.push_back(s);
  }
  return out;
}

std::string PathSafe(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  if (out.empty() || out == "." || out == "..") out = "%" + out;
  return out;
}

Result<int> BaselineStore::Add(Baseline b) const {
  const fs::path dir = fs::path(dir_) / PathSafe(b.template_name) / PathSafe(b.shape);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir.string() + ": " + ec.message());
  int latest = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 6 && name[0] == 'v' && name.ends_with(".json"))
      latest = std::max(latest, std::atoi(name.c_str() + 1));
  }
  if (ec) return Status::IoError("cannot list " + dir.string() + ": " + ec.message());
  b.version = latest + 1;
  const fs::path path = dir / fmt::format("v{:04d}.json", b.version);
  if (Status st = WriteFileAtomically(path.string(), BaselineToJson(b).dump(1) + "\n"); !st.ok())
    return st;
  return b.version;
}

Result<std::vector<Baseline>> BaselineStore::List(std::vector<std::string>* skipped) const {
  std::vector<Baseline> out;
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const fs::path& p = it->path();
    if (!it->is_regular_file() || p.extension() != ".json") continue;
    // The file name is the version (the JSON's own "version" is informative).
    const std::string fname = p.filename().string();
    std::optional<int> file_version;
    if (fname.size() > 6 && fname[0] == 'v')
      file_version = ParseInt<int>(std::string_view(fname).substr(1, fname.size() - 6));
    if (!file_version || *file_version < 1) {
      if (skipped) skipped->push_back(p.string() + ": not a version file (vNNNN.json)");
      continue;
    }
    // A baseline holds at most ~30 metrics of kMaxSample numbers: 16 MiB is far beyond one.
    const FileReadResult f = ReadSmallFile(p.string(), size_t{16} << 20);
    Result<Baseline> b = Status::Corruption("unreadable");
    if (!f.ok) {
      b = ErrnoStatus("read", f.err);
    } else {
      json j = json::parse(f.data, nullptr, false);
      b = j.is_discarded() ? Result<Baseline>(Status::Corruption("not JSON")) : BaselineFromJson(j);
    }
    if (!b.ok()) {
      if (skipped) skipped->push_back(p.string() + ": " + b.status().message());
      continue;
    }
    b->version = *file_version;
    out.push_back(std::move(b).value());
  }
  if (ec) return Status::IoError("cannot read " + dir_ + ": " + ec.message());
  std::sort(out.begin(), out.end(), [](const Baseline& x, const Baseline& y) {
    return std::tie(x.template_name, x.shape, x.version) <
           std::tie(y.template_name, y.shape, y.version);
  });
  return out;
}

Result<Baseline> BaselineStore::Get(const std::string& template_name, const std::string& shape,
                                    int version) const {
  auto all = List();
  if (!all.ok()) return all.status();
  std::set<std::string> shapes;
  const Baseline* best = nullptr;
  for (const Baseline& b : *all) {
    if (b.template_name != template_name) continue;
    shapes.insert(b.shape);
    if (!shape.empty() && b.shape != shape) continue;
    if (version != 0 && b.version != version) continue;
    if (!best || b.version > best->version) best = &b;
  }
  if (shape.empty() && shapes.size() > 1) {
    std::string list;
    for (const auto& s : shapes) list += (list.empty() ? "" : ", ") + s;
    return Status::InvalidArgument(
        "template '" + template_name +
        "' has baselines on several shapes; pick one with --shape: " + list);
  }
  if (!best)
    return Status::NotFound(fmt::format("no baseline for template '{}'{}{} under {}", template_name,
                                        shape.empty() ? "" : " on " + shape,
                                        version ? fmt::format(" version {}", version) : "", dir_));
  return *best;
}

}  // namespace gpuwatch::analyze
