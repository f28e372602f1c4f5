// `nvidia-smi topo -m` (and `topo -mp`) text: parse it into a Topology, render a Topology back
// into that text, and export the JSON that `topo import` scripts check.
//
// The parser is written for what people actually paste: TAB-separated or space-aligned
// columns, a shell prompt or command line above the table, ANSI colour codes, markdown "> "
// quoting, CRLF, a legend and a "NIC Legend" below it, and excerpts cut anywhere. A cut table
// still parses: the result says in `warnings` what is missing. Only input in which no matrix
// header can be found at all is an error. Work and memory are linear in the input (columns,
// tokens per line and warnings are capped), so any bytes are safe (fuzzed by topo_fuzz.cc).
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "topo/topology.h"

namespace gpuwatch::topo {

// The header is the first line whose first token is a GPU label ("GPU0") and that holds no
// link token; its columns are GPU<n> labels, NIC labels (NIC<n>, or device names such as
// mlx5_0 in older versions), then "CPU Affinity", "NUMA Affinity" and "GPU NUMA ID" (any of
// them may be missing). Rows follow until a line that is not a row; cells are whitespace
// separated and empty TAB fields are skipped. "N/A" reads as absent. InvalidArgument, naming
// the line concerned, when there is no header.
Result<Topology> ParseTopoMatrix(std::string_view text);

// nvidia-smi style text: a TAB-separated header and rows (NIC columns labelled NIC<n>, all
// three affinity columns, absent cells as N/A), the legend, and a NIC Legend when a NIC name is
// not its label. Rows whose cells are all absent are left out. For a complete table
// ParseTopoMatrix(RenderTopoMatrix(t)) == t.
std::string RenderTopoMatrix(const Topology& t);

// The `topo import` contract (scripts depend on it; keep the shape):
//   {"gpus": N, "links": [["X","NV18",…],…], "nics": ["mlx5_0",…], "gpu_nic_links": [[…],…],
//    "cpu_affinity": ["0-55",…], "numa_affinity": [0,…]}
// Matrix entries as printed; absent cells and values are null; gpu_nic_links has one row per
// GPU ([] when there are no NIC columns). A NUMA Affinity that is not one integer ("6-7") is
// given as the printed string. Strings are made valid UTF-8 so that dump() cannot throw.
nlohmann::json TopoImportJson(const Topology& t);

}  // namespace gpuwatch::topo
