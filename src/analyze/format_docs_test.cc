// docs/format/trace.md and docs/format/findings.md say the contracts in the project's own words;
// this keeps their record types, field lists and causes equal to ../shared/spec and to the cause
// catalog, so the two cannot drift apart unnoticed.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "model/cause.h"

namespace gpuwatch::analyze {
namespace {

using nlohmann::json;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// "| `data_stall` | task | …" → ("data_stall", "task"), in the order of the file.
std::vector<std::pair<std::string, std::string>> CauseRows(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> rows;
  bool in_causes = false;
  for (const std::string& line : Lines(text)) {
    if (line.rfind("## ", 0) == 0) in_causes = line == "## Causes";
    if (!in_causes || line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    const size_t bar = line.find('|', end);
    const size_t bar2 = line.find('|', bar + 1);
    std::string layer = line.substr(bar + 1, bar2 - bar - 1);
    layer.erase(0, layer.find_first_not_of(' '));
    layer.erase(layer.find_last_not_of(' ') + 1);
    rows.emplace_back(line.substr(3, end - 3), layer);
  }
  return rows;
}

TEST(FormatDocsTest, TheFindingsPagesCausesAreTheCatalogs) {
  const auto rows = CauseRows(Slurp(std::string(GPUWATCH_SOURCE_DIR) + "/docs/format/findings.md"));
  ASSERT_EQ(rows.size(), model::CauseCatalog().size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].first, model::CauseCatalog()[i].name);
    EXPECT_EQ(rows[i].second, model::LayerName(model::CauseCatalog()[i].layer)) << rows[i].first;
  }
}

TEST(FormatDocsTest, TheFindingsPagesCausesAreTheSpecs) {
  const std::string spec = std::string(GPUWATCH_SOURCE_DIR) + "/../shared/spec/findings.md";
  if (!std::ifstream(spec)) GTEST_SKIP() << spec << " is absent (it lives beside the checkout)";
  EXPECT_EQ(CauseRows(Slurp(std::string(GPUWATCH_SOURCE_DIR) + "/docs/format/findings.md")),
            CauseRows(Slurp(spec)));
}

// Per record type, the field sets: "node", "node.gpus", "node.nics", "host.nics", … .
using Fields = std::map<std::string, std::set<std::string>>;

// The spec's JSON examples under each "### `type`" heading.
Fields SpecFields(const std::string& text) {
  Fields out;
  std::string type, block;
  bool in_block = false;
  auto take = [&](const json& j) {
    for (const auto& [k, v] : j.items()) {
      if (k == "t" || k == "type" || k == "node") continue;
      out[type].insert(k);
      if (v.is_array() && !v.empty() && v[0].is_object()) {
        for (const auto& [nk, nv] : v[0].items()) out[type + "." + k].insert(nk);
      } else if (v.is_object() && type == "host") {
        for (const auto& [name, nic] : v.items()) {
          for (const auto& [nk, nv] : nic.items()) out[type + "." + k].insert(nk);
        }
      }
    }
  };
  for (const std::string& line : Lines(text)) {
    if (line.rfind("### `", 0) == 0) type = line.substr(5, line.find('`', 5) - 5);
    if (line.rfind("```", 0) == 0) {
      if (in_block && !type.empty()) {
        // One or more objects, each possibly over several lines.
        int depth = 0;
        std::string one;
        for (char c : block) {
          one += c;
          if (c == '{') ++depth;
          if (c == '}' && --depth == 0) {
            take(json::parse(one.substr(one.find('{'))));
            one.clear();
          }
        }
      }
      in_block = !in_block;
      block.clear();
      continue;
    }
    if (in_block) block += line + "\n";
  }
  return out;
}

// The field tables of docs/format/trace.md under each "### `type`" heading: the first is the
// record's own fields, the next ones its nested objects ("Each entry of `gpus`", "Each value of
// `nics`").
Fields DocFields(const std::string& text) {
  Fields out;
  std::string type, part;
  for (const std::string& line : Lines(text)) {
    if (line.rfind("### `", 0) == 0) {
      type = line.substr(5, line.find('`', 5) - 5);
      part = type;
    }
    if (line.rfind("Each entry of `", 0) == 0 || line.rfind("Each value of `", 0) == 0) {
      const size_t a = line.find('`') + 1;
      part = type + "." + line.substr(a, line.find('`', a) - a);
    }
    if (type.empty() || line.rfind("| `", 0) != 0) continue;
    out[part].insert(line.substr(3, line.find('`', 3) - 3));
  }
  return out;
}

TEST(FormatDocsTest, TheTracePagesFieldsAreTheSpecs) {
  const std::string spec = std::string(GPUWATCH_SOURCE_DIR) + "/../shared/spec/trace-format.md";
  if (!std::ifstream(spec)) GTEST_SKIP() << spec << " is absent (it lives beside the checkout)";
  const Fields want = SpecFields(Slurp(spec));
  const Fields got = DocFields(Slurp(std::string(GPUWATCH_SOURCE_DIR) + "/docs/format/trace.md"));
  ASSERT_FALSE(want.empty());
  for (const auto& [part, fields] : want)
    EXPECT_EQ(got.count(part) ? got.at(part) : std::set<std::string>{}, fields) << part;
  for (const auto& [part, fields] : got)
    EXPECT_EQ(want.count(part), 1u) << part << " is not in the spec";
}

}  // namespace
}  // namespace gpuwatch::analyze
