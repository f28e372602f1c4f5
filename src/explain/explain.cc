#include "explain/explain.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "analyze/diagnoser.h"
#include "collect/smi_text.h"
#include "common/strings.h"
#include "logs/kernel_log.h"
#include "logs/launcher_log.h"
#include "logs/log_classify.h"
#include "nccl/nccl_analysis.h"
#include "nccl/nccl_log.h"
#include "nccl/nccl_tests.h"
#include "topo/topo_text.h"
#include "trace/trace_records.h"

namespace gpuwatch::explain {

using nlohmann::json;

std::string_view KindName(Kind k) {
  switch (k) {
    case Kind::kKernel:
      return "kernel";
    case Kind::kNccl:
      return "nccl";
    case Kind::kLauncher:
      return "launcher";
    case Kind::kSmi:
      return "smi";
    case Kind::kTopology:
      return "topology";
    case Kind::kNcclTests:
      return "nccl_tests";
  }
  return "kernel";
}

namespace {

// gzip (one or more members) into text, at most kMaxFileBytes.
Result<std::string> Gunzip(const std::string& path, const std::string& data) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return Status::Internal("zlib init failed");
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  char buf[1 << 16];
  int rc = Z_OK;
  while (true) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - z.avail_out);
    if (out.size() > kMaxFileBytes) {
      inflateEnd(&z);
      return Status::ResourceExhausted(path + ": more than 256 MiB of text");
    }
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      inflateReset(&z);  // the next member of a concatenated gzip file
      continue;
    }
    if (rc != Z_OK) {
      inflateEnd(&z);
      return Status::Corruption(
          fmt::format("{}: broken gzip data ({})", path, z.msg != nullptr ? z.msg : "truncated"));
    }
    if (z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      return Status::Corruption(path + ": the gzip stream ends early");
    }
  }
  inflateEnd(&z);
  return out;
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(at, nl - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back(line);
    at = nl + 1;
  }
  return out;
}

template <typename T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json NcclTestsJson(const nccl::PerfReport& r) {
  json rows = json::array();
  for (const nccl::PerfRow& row : r.rows) {
    json j = {{"size_bytes", row.size_bytes}};
    j["busbw_oop_gbs"] = row.out_of_place ? json(row.out_of_place->busbw_gbps) : json(nullptr);
    j["busbw_ip_gbs"] = row.in_place ? json(row.in_place->busbw_gbps) : json(nullptr);
    j["wrong_oop"] = row.out_of_place ? OrNull(row.out_of_place->wrong) : json(nullptr);
    j["wrong_ip"] = row.in_place ? OrNull(row.in_place->wrong) : json(nullptr);
    rows.push_back(std::move(j));
  }
  return {{"rows", rows},
          {"avg_busbw_gbs", OrNull(r.avg_busbw_gbps)},
          {"nccl_version", OrNull(r.nccl_version)}};
}

// What one file is made of, for the findings across files.
struct Parsed {
  std::string stem;  // the file's name without directories and extensions: the job it logs
  std::vector<std::string_view> lines;
  // Per line: one the kernel wrote (an NVRM line or one ParseKernelLine knows), one of NCCL's.
  std::vector<bool> kernel_line, nccl_line;
  std::vector<Kind> kinds;
  std::optional<collect::SmiReport> smi;
  std::optional<topo::Topology> topology;
  std::vector<std::string> hosts;  // host names the text gives
};

bool Has(const std::vector<Kind>& kinds, Kind k) {
  return std::find(kinds.begin(), kinds.end(), k) != kinds.end();
}

std::string StemOf(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const size_t dot = name.find('.');
  if (dot != std::string::npos && dot > 0) name = name.substr(0, dot);
  return name.empty() ? "job" : name;
}

}  // namespace

nccl::TopoHint TopoHintOf(const topo::Topology& t) {
  nccl::TopoHint h;
  h.gpu_links = t.gpu_links;
  h.nics = t.nic_names;
  for (const auto& n : t.nic_names) {
    if (n.rfind("mlx", 0) == 0 || n.rfind("ib", 0) == 0 || n.rfind("bnxt_re", 0) == 0 ||
        n.rfind("irdma", 0) == 0 || n.rfind("efa", 0) == 0) {
      h.ib_present = true;
    }
  }
  return h;
}

Result<std::string> ReadInput(const std::string& path) {
  // Read no more than can hold kMaxFileBytes of text: gzip never makes a text much larger
  // (stored blocks add a few bytes in 64 KiB), so a file over twice the limit is too large
  // whatever it holds.
  FileReadResult in = ReadSmallFile(path, 2 * kMaxFileBytes + 1);
  if (!in.ok)
    return Status::NotFound(fmt::format("cannot read {}: {}", path, std::strerror(in.err)));
  if (in.data.size() > 2 * kMaxFileBytes) {
    return Status::ResourceExhausted(path + ": more than 256 MiB of text");
  }
  if (in.data.size() >= 2 && static_cast<unsigned char>(in.data[0]) == 0x1f &&
      static_cast<unsigned char>(in.data[1]) == 0x8b) {
    return Gunzip(path, in.data);
  }
  if (in.data.size() > kMaxFileBytes) {
    return Status::ResourceExhausted(path + ": more than 256 MiB of text");
  }
  return std::move(in.data);
}

namespace {

// Reads one file: its kinds and the object of each.
json ReadOne(const InputFile& in, Parsed* p) {
  p->stem = StemOf(in.path);
  p->lines = Lines(in.text);
  json file = {{"path", in.path}, {"kinds", json::array()}, {"warnings", json::array()}};
  // The kinds in docs/format/explain.md's order (Kind's), each with its object.
  bool kernel = false, nccl = false, launcher = false;
  p->kernel_line.reserve(p->lines.size());
  p->nccl_line.reserve(p->lines.size());
  for (std::string_view l : p->lines) {
    p->kernel_line.push_back(l.find("NVRM:") != std::string_view::npos ||
                             logs::ParseKernelLine(l).kind != logs::KernelLine::Kind::kNone);
    p->nccl_line.push_back(logs::ClassifyLogLine(l).nccl);
    kernel = kernel || p->kernel_line.back();
    nccl = nccl || p->nccl_line.back() || nccl::IsNcclRasBanner(l);
    if (!launcher && logs::LooksLikeLauncherLine(l)) launcher = true;
  }
  if (kernel) {
    const logs::KernelReport k = logs::ParseKernelText(in.text);
    file["kernel"] = logs::KernelReportJson(k);
    p->hosts.insert(p->hosts.end(), k.hosts.begin(), k.hosts.end());
    p->kinds.push_back(Kind::kKernel);
  }
  if (nccl) {
    const nccl::NcclLogReport report = nccl::ParseNcclLog(in.text);
    file["nccl"] = nccl::NcclReportJson(report, nccl::AnalyzeNccl(report, nullptr));
    for (const auto& h : report.hosts) {
      if (!h.name.empty()) p->hosts.push_back(h.name);
    }
    p->kinds.push_back(Kind::kNccl);
  }
  if (launcher) {
    logs::LauncherLogParser parser;
    for (size_t i = 0; i < p->lines.size(); ++i) parser.Feed(p->lines[i], i + 1);
    file["launcher"] = logs::LauncherReportJson(parser.report());
    for (const auto& f : parser.report().failures) {
      if (f.host && !f.host->empty()) p->hosts.push_back(*f.host);
    }
    p->kinds.push_back(Kind::kLauncher);
  }
  if (collect::LooksLikeSmi(in.text)) {
    collect::SmiReport smi = collect::ParseSmiText(in.text);
    if (!smi.gpus.empty() || !smi.processes.empty() || smi.driver_version) {
      file["smi"] = collect::SmiReportJson(smi);
      for (const auto& w : smi.warnings) file["warnings"].push_back("smi: " + w);
      p->smi = std::move(smi);
      p->kinds.push_back(Kind::kSmi);
    }
  }
  if (auto t = topo::ParseTopoMatrix(in.text); t.ok() && !t->gpu_links.empty()) {
    file["topology"] = topo::TopoImportJson(*t);
    for (const auto& w : t->warnings) file["warnings"].push_back("topology: " + w);
    p->topology = std::move(*t);
    p->kinds.push_back(Kind::kTopology);
  }
  if (auto perf = nccl::ParseNcclTestsOutput(in.text); perf.ok()) {
    file["nccl_tests"] = NcclTestsJson(*perf);
    for (const auto& w : perf->warnings) file["warnings"].push_back("nccl_tests: " + w);
    p->kinds.push_back(Kind::kNcclTests);
  }
  for (Kind k : p->kinds) file["kinds"].push_back(KindName(k));
  if (p->kinds.empty()) {
    file["warnings"].push_back(
        "nothing recognised: not a kernel log, NCCL log, launcher log, nvidia-smi output, "
        "topo -m matrix or nccl-tests output");
  }
  return file;
}

// A clock-event reason held in one nvidia-smi snapshot of a busy GPU: what the card rules
// would say of it. One sample: the software power cap, which a GPU at full load holds in
// almost every sample (docs/research/clock-reasons.md §5), counts only with the clock well below
// its maximum.
void JudgeSnapshot(const std::string& node, const collect::SmiReport& smi, double t,
                   std::vector<analyze::Finding>* out) {
  using analyze::Cause;
  using analyze::Severity;
  for (const collect::SmiGpu& g : smi.gpus) {
    if (!g.index) continue;
    const int gpu = *g.index;
    auto add = [&](Cause cause, Severity sev, std::string summary, std::string evidence) {
      analyze::Finding f = analyze::MakeFinding(cause, sev, node, gpu);
      f.first_seen = f.last_seen = t;
      f.summary = std::move(summary);
      f.evidence = {std::move(evidence), "one nvidia-smi snapshot"};
      f.action =
          "Take a few more snapshots (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER) to "
          "see whether it holds";
      out->push_back(std::move(f));
    };
    const bool busy = g.util_pct && *g.util_pct >= 30;
    const bool slow =
        g.sm_clock_mhz && g.max_sm_clock_mhz && *g.sm_clock_mhz < 0.9 * *g.max_sm_clock_mhz;
    if (busy && g.clock_event_reasons) {
      const auto& r = *g.clock_event_reasons;
      auto has = [&](std::string_view x) { return std::find(r.begin(), r.end(), x) != r.end(); };
      const std::string reasons = fmt::format("clock event reasons: {}", fmt::join(r, ", "));
      if (has("hw_thermal") || has("sw_thermal")) {
        add(Cause::kThermalThrottle, Severity::kWarning,
            fmt::format("GPU {} is thermally throttled{}", gpu,
                        g.temp_c ? fmt::format(" at {} °C", *g.temp_c) : ""),
            reasons);
      } else if (has("hw_power_brake") || (has("sw_power_cap") && slow)) {
        add(Cause::kPowerThrottle, Severity::kWarning,
            fmt::format("GPU {} is held by its power limit", gpu), reasons);
      } else if (has("hw_slowdown") || ((has("app_clocks") || has("sync_boost")) && slow)) {
        add(Cause::kClockSlowdown, Severity::kWarning,
            fmt::format("GPU {}'s clocks are held down", gpu), reasons);
      }
    }
    if (g.pcie_width_current && g.pcie_width_max && *g.pcie_width_current < *g.pcie_width_max) {
      add(Cause::kPcieDowngrade, Severity::kWarning,
          fmt::format("GPU {} PCIe link runs at x{} of x{}", gpu, *g.pcie_width_current,
                      *g.pcie_width_max),
          fmt::format("pcie link width x{} of x{}", *g.pcie_width_current, *g.pcie_width_max));
    }
    if ((g.ecc.volatile_uncorrected && *g.ecc.volatile_uncorrected > 0) ||
        g.ecc.remapped_rows_failure.value_or(false)) {
      add(Cause::kEccDbe, Severity::kCritical,
          fmt::format("GPU {} had an uncorrectable memory error", gpu),
          g.ecc.remapped_rows_failure.value_or(false)
              ? "remapped rows failure: yes"
              : fmt::format("volatile uncorrected ECC errors: {}", *g.ecc.volatile_uncorrected));
    }
  }
}

}  // namespace

Explanation Explain(const std::vector<InputFile>& files, const std::string& node_flag) {
  Explanation e;
  json list = json::array();
  std::vector<Parsed> parsed(files.size());
  for (size_t i = 0; i < files.size(); ++i) list.push_back(ReadOne(files[i], &parsed[i]));

  // The node: the host the text gives, else the flag.
  std::string node;
  for (const Parsed& p : parsed) {
    if (!p.hosts.empty()) {
      node = p.hosts.front();
      break;
    }
  }
  if (node.empty()) node = node_flag.empty() ? "unknown" : node_flag;

  // The node as the files describe it: nvidia-smi's GPUs, topo -m's links and NICs.
  trace::TraceNode desc;
  for (const Parsed& p : parsed) {
    if (p.smi && !desc.gpus) {
      std::vector<trace::TraceNodeGpu> gpus;
      for (const collect::SmiGpu& g : p.smi->gpus) {
        trace::TraceNodeGpu n;
        if (g.index) n.index = static_cast<uint32_t>(*g.index);
        n.uuid = g.uuid;
        n.name = g.name;
        n.pci_bus_id = g.bus_id;
        n.memory_total_mib = g.mem_total_mib;
        n.power_limit_w = g.power_limit_w;
        n.max_sm_clock_mhz = g.max_sm_clock_mhz;
        n.pcie_max_gen = g.pcie_gen_max;
        n.pcie_max_width = g.pcie_width_max;
        gpus.push_back(std::move(n));
      }
      desc.gpus = std::move(gpus);
      desc.driver_version = p.smi->driver_version;
      desc.cuda_version = p.smi->cuda_version;
    }
    if (p.topology && !desc.topology) {
      desc.topology = trace::TraceTopology{p.topology->gpu_links};
      std::vector<trace::TraceNodeNic> nics;
      const bool rdma = TopoHintOf(*p.topology).ib_present;
      for (const std::string& name : p.topology->nic_names) {
        trace::TraceNodeNic nic;
        nic.name = name;
        if (rdma) nic.type = "ib";
        nics.push_back(std::move(nic));
      }
      desc.nics = std::move(nics);
    }
  }

  // Every line, in the order of the files, as the records the live agent would have written:
  // kernel lines from the kernel, NCCL lines and the rest of a launcher or training log from the
  // job the file logs. Times are the lines' order (line n is n × 10 ms): text from different
  // tools has no common clock.
  analyze::Diagnoser d;
  double t = 1;
  auto observe = [&](trace::TraceRecord r) {
    r.t = t;
    r.t_ms = static_cast<int64_t>(t * 1000);
    r.node = node;
    d.Observe(r);
  };
  {
    trace::TraceRecord r;
    r.body = desc;
    observe(std::move(r));
  }
  std::vector<analyze::Finding> snapshot_findings;
  for (const Parsed& p : parsed) {
    const bool launcher = Has(p.kinds, Kind::kLauncher);
    for (size_t i = 0; i < p.lines.size(); ++i) {
      const std::string_view line = p.lines[i];
      t += 0.01;
      const bool nccl = p.nccl_line[i];
      const bool kernel = p.kernel_line[i];
      if (!kernel && !nccl && !launcher) continue;
      trace::TraceLog log;
      log.line = std::string(line);
      log.source = kernel ? "kernel" : nccl ? "nccl" : "job";
      if (!kernel) log.job = p.stem;
      trace::TraceRecord r;
      r.body = std::move(log);
      observe(std::move(r));
    }
    if (p.smi) JudgeSnapshot(node, *p.smi, t, &snapshot_findings);
  }
  e.findings = d.Finish(t);
  for (analyze::Finding& f : snapshot_findings) e.findings.push_back(std::move(f));
  e.document = analyze::FindingsDocument(e.findings, json::object());
  e.document.erase("stats");
  e.document["files"] = std::move(list);
  e.document["node"] = node;
  return e;
}

std::string RenderExplanation(const Explanation& e) {
  std::string out;
  for (const json& f : e.document["files"]) {
    std::vector<std::string> kinds;
    for (const json& k : f["kinds"]) kinds.push_back(k.get<std::string>());
    out += fmt::format(
        "{}: {}\n", f["path"].get<std::string>(),
        kinds.empty() ? "nothing recognised" : fmt::format("{}", fmt::join(kinds, ", ")));
    if (f.contains("kernel")) {
      const json& k = f["kernel"];
      out += fmt::format("  kernel: {} XID line(s), {} OOM kill(s), {} GPU(s) fallen off the bus\n",
                         k["xid"].size(), k["oom_kills"].size(), k["fallen_off_bus"].size());
      for (const json& x : k["xid"]) {
        out += fmt::format("    Xid {} on {}: {}\n", x["code"].dump(),
                           x["pci_bus_id"].is_string() ? x["pci_bus_id"].get<std::string>() : "?",
                           x["text"].is_string() ? x["text"].get<std::string>() : "");
      }
    }
    if (f.contains("launcher")) {
      const json& l = f["launcher"];
      out += fmt::format("  launcher: {} failure(s), {} NCCL watchdog timeout(s), {} CUDA OOM(s)\n",
                         l["failures"].size(), l["watchdog_timeouts"].size(), l["cuda_oom"].size());
      for (const json& x : l["failures"]) {
        out += fmt::format("    rank {} (local rank {}, pid {}) exit code {}{}\n", x["rank"].dump(),
                           x["local_rank"].dump(), x["pid"].dump(), x["exitcode"].dump(),
                           x["signal"].is_string() ? " " + x["signal"].get<std::string>() : "");
      }
    }
    if (f.contains("nccl")) {
      const json& n = f["nccl"];
      out += fmt::format("  nccl: version {}, {} ranks, {} nodes\n", n["nccl_version"].dump(),
                         n["ranks"].dump(), n["nodes"].dump());
    }
    if (f.contains("smi")) {
      out += fmt::format("  nvidia-smi: {} GPU(s), driver {}\n", f["smi"]["gpus"].size(),
                         f["smi"]["driver_version"].dump());
    }
    if (f.contains("topology")) {
      out += fmt::format("  topo -m: {} GPU(s)\n", f["topology"]["gpus"].dump());
    }
    if (f.contains("nccl_tests")) {
      out += fmt::format("  nccl-tests: {} row(s), average bus bandwidth {} GB/s\n",
                         f["nccl_tests"]["rows"].size(), f["nccl_tests"]["avg_busbw_gbs"].dump());
    }
    for (const json& w : f["warnings"]) out += "  warning: " + w.get<std::string>() + "\n";
  }
  out += "\n";
  if (e.findings.empty()) return out + "no findings\n";
  for (const json& f : e.document["findings"]) {
    std::string place = f["node"].get<std::string>();
    if (f.contains("gpu")) place += fmt::format(" GPU{}", f["gpu"].dump());
    if (f.contains("job")) place += " job " + f["job"].get<std::string>();
    if (f.contains("rank")) place += fmt::format(" rank {}", f["rank"].dump());
    out += fmt::format("{:<8} {:<17} {}: {}\n", f["severity"].get<std::string>(),
                       f["cause"].get<std::string>(), place, f["summary"].get<std::string>());
    for (const json& ev : f["evidence"]) out += "           - " + ev.get<std::string>() + "\n";
  }
  return out;
}

}  // namespace gpuwatch::explain
