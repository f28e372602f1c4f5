#include "cli/topo_cmd.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/link_tools.h"
#include "collect/nvml_source.h"
#include "collect/topology_probe.h"
#include "common/strings.h"
#include "common/time_base.h"
#include "topo/archive.h"
#include "topo/topo_text.h"

namespace gpuwatch::cli {
namespace {

constexpr size_t kMaxInputBytes = size_t{64} << 20;

// One side of a diff: a full snapshot, or only a matrix (an imported `topo -m` capture).
struct Side {
  std::string label;
  std::optional<topo::NodeSnapshot> snapshot;
  topo::Topology matrix;
};

std::string Hostname() {
  char buf[256] = {};
  return gethostname(buf, sizeof(buf) - 1) == 0 ? buf : "";
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

topo::NodeSnapshot ProbeLive(const TopoOptions& o, std::ostream& err) {
  collect::NvmlSourceOptions no;
  if (!o.nvml_lib.empty()) no.library_path = o.nvml_lib;
  auto nvml = std::make_unique<collect::NvmlSource>(no);
  collect::GpuSource* gpu = nvml.get();
  if (Status st = nvml->Init(); !st.ok()) {
    err << "gpuwatch: no GPU facts (" << st.message() << "); sysfs only\n";
    gpu = nullptr;
  }
  return collect::ProbeNodeTopology(gpu, o.root, Hostname(), NowMs());
}

std::string ArchiveDir(const TopoOptions& o) { return o.data_dir + "/topology"; }

std::optional<int> VersionArg(const std::string& a) {
  std::string_view s = a;
  if (!s.empty() && (s[0] == 'v' || s[0] == 'V')) s.remove_prefix(1);
  std::optional<int> v = ParseInt<int>(s);
  if (!v || *v <= 0) return std::nullopt;
  return v;
}

std::optional<Side> Load(const TopoOptions& o, const std::string& arg, std::ostream& err) {
  Side side;
  side.label = arg;
  if (arg == "live") {
    side.snapshot = ProbeLive(o, err);
  } else if (auto v = VersionArg(arg); v && access(arg.c_str(), F_OK) != 0) {
    if (o.data_dir.empty()) {
      err << "gpuwatch: version " << arg << " needs --data-dir (the agent's)\n";
      return std::nullopt;
    }
    auto s = topo::TopologyArchive(ArchiveDir(o)).Load(*v);
    if (!s.ok()) {
      err << "gpuwatch: " << s.status().message() << "\n";
      return std::nullopt;
    }
    side.label = "v" + std::to_string(*v);
    side.snapshot = std::move(*s);
  } else {
    FileReadResult f = ReadSmallFile(arg, kMaxInputBytes);
    if (!f.ok) {
      err << "gpuwatch: cannot read " << arg << ": " << std::strerror(f.err) << "\n";
      return std::nullopt;
    }
    if (TrimWhitespace(f.data).substr(0, 1) == "{") {
      auto s = topo::SnapshotFromJson(f.data);
      if (!s.ok()) {
        err << "gpuwatch: " << arg << ": " << s.status().message() << "\n";
        return std::nullopt;
      }
      side.snapshot = std::move(*s);
    } else {
      auto t = topo::ParseTopoMatrix(f.data);
      if (!t.ok()) {
        err << "gpuwatch: " << arg << ": " << t.status().message() << "\n";
        return std::nullopt;
      }
      for (const auto& w : t->warnings) err << "gpuwatch: " << arg << ": " << w << "\n";
      side.matrix = std::move(*t);
      return side;
    }
  }
  side.matrix = side.snapshot->matrix;
  return side;
}

std::string Opt(const std::optional<unsigned>& v) { return v ? std::to_string(*v) : "?"; }

void PrintFacts(const topo::NodeSnapshot& s, bool p2p, std::ostream& out) {
  out << topo::RenderTopoMatrix(s.matrix);
  out << "\nGPU links:\n";
  for (const topo::GpuFacts& g : s.gpus) {
    out << fmt::format("  GPU{} {} {}  PCIe gen{} x{} (max gen{} x{})", g.index, g.pci_bus_id,
                       g.name, Opt(g.pcie_gen), Opt(g.pcie_width), Opt(g.pcie_max_gen),
                       Opt(g.pcie_max_width));
    if (!g.nvlinks.empty()) {
      size_t active = 0;
      std::map<std::string, int> peers;
      for (const auto& l : g.nvlinks) {
        if (!l.active) continue;
        ++active;
        ++peers[l.remote_gpu ? "GPU" + std::to_string(*l.remote_gpu) : l.remote_kind];
      }
      out << fmt::format("  NVLink {}/{} active", active, g.nvlinks.size());
      if (!g.nvlinks.empty() && g.nvlinks[0].version) {
        out << " (NVLink" << *g.nvlinks[0].version << ")";
      }
      std::string to;
      for (const auto& [peer, n] : peers)
        to += fmt::format("{}{}×{}", to.empty() ? "" : ", ", n, peer);
      if (!to.empty()) out << " to " << to;
      std::string down;
      for (const auto& l : g.nvlinks) {
        if (!l.active) down += (down.empty() ? "" : ",") + std::to_string(l.link);
      }
      if (!down.empty()) out << "; down: " << down;
    }
    out << "\n";
  }
  if (!s.nics.empty()) {
    out << "\nNICs:\n";
    for (const topo::NicFacts& n : s.nics) {
      out << fmt::format("  {} {} NUMA {}", n.name, n.pci_bus_id.empty() ? "-" : n.pci_bus_id,
                         n.numa_node ? std::to_string(*n.numa_node) : "?");
      for (const std::string& d : n.netdevs) out << " " << d;
      for (const auto& p : n.ports) {
        out << fmt::format("  port {} {} {} {}", p.port, p.state,
                           p.rate_gbps ? fmt::format("{:g} Gb/s", *p.rate_gbps) : "?",
                           p.link_layer);
      }
      out << "\n";
    }
  }
  if (p2p && !s.p2p_read.empty()) {
    out << "\nP2P read (OK, CNS chipset, GNS GPU, TNS topology not supported, DIS disabled, NS "
           "not supported, U unknown):\n\t";
    for (const auto& g : s.gpus) out << "GPU" << g.index << "\t";
    out << "\n";
    for (size_t i = 0; i < s.p2p_read.size(); ++i) {
      out << "GPU" << s.gpus[i].index;
      for (size_t j = 0; j < s.p2p_read[i].size(); ++j) {
        out << "\t" << (i == j ? "X" : s.p2p_read[i][j].value_or("-"));
      }
      out << "\n";
    }
  }
}

}  // namespace

int RunTopoLive(const TopoOptions& o, std::ostream& out, std::ostream& err) {
  topo::NodeSnapshot s = ProbeLive(o, err);
  for (const auto& w : s.warnings) err << "gpuwatch: " << w << "\n";
  if (o.json) {
    out << topo::SnapshotToJson(s) << "\n";
  } else {
    PrintFacts(s, o.p2p, out);
  }
  return 0;
}

int RunTopoList(const TopoOptions& o, std::ostream& out, std::ostream& err) {
  topo::TopologyArchive archive(ArchiveDir(o));
  auto list = archive.List();
  if (!list.ok()) {
    err << "gpuwatch: " << list.status().message() << "\n";
    return 2;
  }
  nlohmann::json j = nlohmann::json::array();
  if (!o.json)
    out << fmt::format("{:<8} {:<24} {:>5} {:>5}  {}\n", "VERSION", "TAKEN (UTC)", "GPUS", "NICS",
                       "HOST");
  for (const auto& v : *list) {
    auto s = archive.Load(v.version);
    if (!s.ok()) {
      err << "gpuwatch: " << s.status().message() << "\n";
      continue;
    }
    if (o.json) {
      j.push_back({{"version", v.version},
                   {"taken_at_ms", s->taken_at_ms},
                   {"gpus", s->gpus.size()},
                   {"nics", s->nics.size()},
                   {"hostname", s->hostname}});
      continue;
    }
    const std::string when = FormatUtc(s->taken_at_ms, "%Y-%m-%d %H:%M:%S");
    out << fmt::format("v{:<7} {:<24} {:>5} {:>5}  {}\n", v.version, when, s->gpus.size(),
                       s->nics.size(), s->hostname);
  }
  if (o.json) out << j.dump(2) << "\n";
  return 0;
}

int RunTopoShow(const TopoOptions& o, const std::string& version, std::ostream& out,
                std::ostream& err) {
  std::optional<Side> side = Load(o, version, err);
  if (!side) return 2;
  if (!side->snapshot) {
    out << topo::RenderTopoMatrix(side->matrix);
    return 0;
  }
  if (o.json) {
    out << topo::SnapshotToJson(*side->snapshot) << "\n";
  } else {
    PrintFacts(*side->snapshot, o.p2p, out);
  }
  return 0;
}

int RunTopoDiff(const TopoOptions& o, const std::string& a_arg, const std::string& b_arg,
                std::ostream& out, std::ostream& err) {
  std::string a_name = a_arg, b_name = b_arg.empty() ? "live" : b_arg;
  if (a_name.empty()) {
    if (o.data_dir.empty()) {
      err << "gpuwatch: topo diff without A compares the newest archived version: give "
             "--data-dir (the agent's), or A and B\n";
      return 2;
    }
    auto latest = topo::TopologyArchive(ArchiveDir(o)).Latest();
    if (!latest.ok()) {
      err << "gpuwatch: " << latest.status().message() << "\n";
      return 2;
    }
    a_name = "v" + std::to_string(latest->first);
  }
  std::optional<Side> a = Load(o, a_name, err);
  if (!a) return 2;
  std::optional<Side> b = Load(o, b_name, err);
  if (!b) return 2;
  const std::vector<topo::TopologyChange> changes =
      a->snapshot && b->snapshot ? topo::DiffSnapshots(*a->snapshot, *b->snapshot)
                                 : topo::DiffMatrices(a->matrix, b->matrix);
  if (o.json) {
    nlohmann::json j = {{"a", a->label}, {"b", b->label}, {"changes", nlohmann::json::array()}};
    for (const auto& c : changes) {
      j["changes"].push_back({{"kind", c.kind},
                              {"subject", c.subject},
                              {"before", c.before},
                              {"after", c.after},
                              {"summary", c.summary}});
    }
    out << j.dump(2) << "\n";
  } else if (changes.empty()) {
    out << "no topology change between " << a->label << " and " << b->label << "\n";
  } else {
    out << changes.size() << " change(s) from " << a->label << " to " << b->label << ":\n";
    for (const auto& c : changes) out << "  " << c.kind << ": " << c.summary << "\n";
  }
  return changes.empty() ? 0 : 1;
}

void RegisterTopoCommands(CLI::App* app, Commands* out) {
  struct Flags {
    TopoOptions topo;
    std::string a, b, file, topo_file;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  auto* topo = app->add_subcommand(
      "topo",
      "Node topology (R8): without a subcommand, this node's live `nvidia-smi topo -m` matrix "
      "with its NVLinks, PCIe links and NICs");
  topo->require_subcommand(0, 1);
  auto add_topo_flags = [f](CLI::App* c, bool live) {
    c->add_flag("--json", f->topo.json, "Print the snapshot as JSON (docs/format/topology.md)");
    c->add_option("--data-dir", f->topo.data_dir,
                  "The agent's --data-dir (its topology archive is <data-dir>/topology)");
    if (live) {
      c->add_option("--nvml-lib", f->topo.nvml_lib,
                    "NVML library to dlopen (default libnvidia-ml.so.1)");
      c->add_option("--root", f->topo.root, "sysfs root (default /)");
    }
  };
  add_topo_flags(topo, true);
  topo->add_flag("--p2p", f->topo.p2p, "Also print the P2P read support matrix");
  auto* list = topo->add_subcommand("list", "The archived topology versions");
  add_topo_flags(list, false);
  auto* show = topo->add_subcommand("show", "One archived version, or a snapshot file");
  show->add_option("version", f->a, "v3, 3, or a file")->required();
  add_topo_flags(show, false);
  auto* diff = topo->add_subcommand(
      "diff",
      "What changed between two topologies: each an archived version (v3), live, or a file "
      "(snapshot JSON or a topo -m capture); default the newest version against live. Exit 0 "
      "when nothing changed, 1 when something did");
  diff->add_option("a", f->a, "The older topology (default: the newest archived)");
  diff->add_option("b", f->b, "The newer topology (default: live)");
  add_topo_flags(diff, true);
  auto* import = topo->add_subcommand(
      "import", "Parse a `nvidia-smi topo -m` capture (from any machine) into the topology model");
  import->add_option("file", f->file, "The capture")->required();
  import->add_flag("--json", f->json, "Print the model as JSON");
  auto* nccl = app->add_subcommand(
      "nccl",
      "Analyze an NCCL_DEBUG=INFO log: version, ranks, the transport of every channel, "
      "and fallbacks against the topology (R9)");
  nccl->add_option("file", f->file, "The log")->required();
  nccl->add_option("--topo", f->topo_file, "A `nvidia-smi topo -m` capture of the node");
  nccl->add_flag("--json", f->json, "Print JSON");

  // The subcommands before `topo` itself: it is parsed with each of them.
  out->push_back({import, [f] { return RunTopoImport(f->file, f->json, std::cout, std::cerr); }});
  out->push_back({list, [f] { return RunTopoList(f->topo, std::cout, std::cerr); }});
  out->push_back({show, [f] { return RunTopoShow(f->topo, f->a, std::cout, std::cerr); }});
  out->push_back({diff, [f] { return RunTopoDiff(f->topo, f->a, f->b, std::cout, std::cerr); }});
  out->push_back({topo, [f] { return RunTopoLive(f->topo, std::cout, std::cerr); }});
  out->push_back({nccl, [f] {
                    return RunNcclAnalysis(f->file, f->topo_file, f->json, std::cout, std::cerr);
                  }});
}

}  // namespace gpuwatch::cli
