#include "cli/link_tools.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "explain/explain.h"
#include "nccl/nccl_analysis.h"
#include "nccl/nccl_log.h"
#include "topo/topo_text.h"

namespace gpuwatch::cli {
namespace {

// Captures are small text files; anything beyond this is not one.
constexpr size_t kMaxInputBytes = size_t{256} << 20;

bool ReadAll(const std::string& path, std::string* data, std::ostream& err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    err << "gpuwatch: cannot read " << path << ": " << std::strerror(errno) << "\n";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *data = ss.str();
  if (data->size() > kMaxInputBytes) {
    err << "gpuwatch: " << path << " is larger than 256 MiB\n";
    return false;
  }
  return true;
}

std::string Dump(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

int RunTopoImport(const std::string& file, bool json, std::ostream& out, std::ostream& err) {
  std::string text;
  if (!ReadAll(file, &text, err)) return 2;
  auto t = topo::ParseTopoMatrix(text);
  if (!t.ok()) {
    err << "gpuwatch: " << file << ": " << t.status().message() << "\n";
    return 2;
  }
  for (const auto& w : t->warnings) err << "gpuwatch: " << file << ": " << w << "\n";
  out << (json ? Dump(topo::TopoImportJson(*t)) + "\n" : topo::RenderTopoMatrix(*t));
  return 0;
}

int RunNcclAnalysis(const std::string& file, const std::string& topo_file, bool json,
                    std::ostream& out, std::ostream& err) {
  std::string text;
  if (!ReadAll(file, &text, err)) return 2;
  std::optional<nccl::TopoHint> hint;
  if (!topo_file.empty()) {
    std::string topo_text;
    if (!ReadAll(topo_file, &topo_text, err)) return 2;
    auto t = topo::ParseTopoMatrix(topo_text);
    if (!t.ok()) {
      err << "gpuwatch: " << topo_file << ": " << t.status().message() << "\n";
      return 2;
    }
    hint = explain::TopoHintOf(*t);
  }
  const nccl::NcclLogReport report = nccl::ParseNcclLog(text);
  const std::vector<nccl::Finding> findings = nccl::AnalyzeNccl(report, hint ? &*hint : nullptr);
  const nlohmann::json j = nccl::NcclReportJson(report, findings);
  if (json) {
    out << Dump(j) << "\n";
    return 0;
  }
  out << fmt::format("NCCL {}  ranks {}  nodes {}\n",
                     j["nccl_version"].is_string() ? j["nccl_version"].get<std::string>() : "?",
                     j["ranks"].is_number() ? j["ranks"].dump() : "?",
                     j["nodes"].is_number() ? j["nodes"].dump() : "?");
  out << "transports:";
  for (auto it = j["transports"].begin(); it != j["transports"].end(); ++it)
    if (it->is_number() && it->get<int64_t>() > 0) out << " " << it.key() << "=" << it->dump();
  out << "\n";
  for (const auto& e : j["errors"]) out << "error: " << e.get<std::string>() << "\n";
  for (const auto& f : j["findings"]) {
    out << fmt::format("finding {} ({}): {}\n", f.value("cause", ""), f.value("severity", ""),
                       f.value("summary", ""));
    for (const auto& ev : f.value("evidence", nlohmann::json::array()))
      out << "  - " << ev.get<std::string>() << "\n";
    if (f.contains("action")) out << "  action: " << f["action"].get<std::string>() << "\n";
  }
  return 0;
}

}  // namespace gpuwatch::cli
