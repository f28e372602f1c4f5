// Text that `nvidia-smi` printed, read back: what `gpuwatch explain` makes of an nvidia-smi
// capture someone kept after a job died (docs/format/explain.md, section `smi`).
//
// The forms read are the default table (the 79-column layout before R525 and the 89-column one
// after, with its "Processes:" and "MIG devices:" blocks), `-q` (whole or `-d` sections; both
// "Clocks Event Reasons" and the older "Clocks Throttle Reasons"), `-q -x` (the few elements
// needed are read by a small tag scanner: there is no XML library, and a cut document must
// still give what it holds), `--query-gpu=… --format=csv` with or without `noheader` and
// `nounits` (columns are mapped by the header, or by the `--query-gpu=` list of a command line
// above a headerless row), `--query-compute-apps=…` CSV, `dmon` (any column set; the last
// sample of each GPU) and `-L`.
//
// The parser is written for what people paste: markdown "> " quoting and "\#" escapes, mpirun
// and `srun -l` labels, a shell prompt line and the date line above the table, CRLF, TABs, and
// text cut anywhere (a cut row of CSV or dmon on the last line is read up to its last whole
// field). Each form is an instance of lines; when a file holds several (a table and a -q of
// the same GPUs), they are merged per GPU by bus id, else UUID, else index, in the order they
// appear, and the first value of each field wins.
//
// Conventions (tests/fixtures/explain/smi/SOURCES.md): in -q and -q -x, and in CSV without an
// `index` column, `index` is the order of appearance (a guess that a later form's real index
// replaces on merge). ECC counts are sums over SRAM and DRAM; the table's ECC column fills
// `volatile_uncorrected` only, and its "Off"/"On"/"N/A" leave it null. `clock_event_reasons`
// lists the active reasons in the order -q prints them, whatever the form.
//
// Memory is bounded whatever the input: lines are read up to kMaxSmiLineBytes, GPUs,
// processes, MIG devices per GPU, names and warnings have caps. Any bytes are safe (fuzzed by
// smi_text_fuzz.cc).
//
// Thread-safety: pure functions; the report is a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuwatch::collect {

inline constexpr size_t kMaxSmiGpus = 1024;
inline constexpr size_t kMaxSmiProcesses = 65536;
inline constexpr size_t kMaxSmiLineBytes = 64 * 1024;
inline constexpr size_t kMaxSmiMigDevicesPerGpu = 128;  // MIG makes at most 7 per GPU
inline constexpr size_t kMaxSmiWarnings = 64;

struct SmiEcc {
  std::optional<std::string> mode;  // "Enabled" / "Disabled"
  std::optional<double> volatile_corrected, volatile_uncorrected, aggregate_corrected,
      aggregate_uncorrected, remapped_rows_correctable, remapped_rows_uncorrectable;
  std::optional<bool> remapped_rows_pending, remapped_rows_failure;
};

struct SmiMigDevice {
  std::optional<int> gpu, gi, ci, mig_dev;
  std::optional<double> mem_used_mib, mem_total_mib;
};

struct SmiGpu {
  std::optional<int> index;
  std::optional<std::string> name, bus_id;  // bus_id as printed, case kept
  std::optional<double> temp_c, power_w, power_limit_w, mem_used_mib, mem_total_mib, util_pct,
      pcie_gen_current, pcie_gen_max, pcie_width_current, pcie_width_max;
  // Trace names ("idle", "sw_power_cap", …, "display_clock"); empty when the text shows the
  // reasons and none is active, nullopt when it does not show them.
  std::optional<std::vector<std::string>> clock_event_reasons;
  SmiEcc ecc;
  std::vector<SmiMigDevice> mig_devices;
  // Not in the JSON; for the diagnosis (a clock held below its maximum) and for merging.
  std::optional<double> sm_clock_mhz, max_sm_clock_mhz;
  std::optional<std::string> uuid;
};

struct SmiProcess {
  std::optional<int> gpu;
  std::optional<int64_t> pid;
  std::optional<std::string> name;
  std::optional<double> mem_mib;
};

struct SmiReport {
  std::optional<std::string> driver_version, cuda_version;
  std::vector<SmiGpu> gpus;  // in the order of first appearance
  std::vector<SmiProcess> processes;
  std::vector<std::string> forms;  // "table", "q", "xml", "csv", "dmon", "list", as found
  std::vector<std::string> warnings;
};

// Whether `text` looks like nvidia-smi output at all (a cheap check on its lines): a table
// header, "NVSMI LOG", the XML root, a `-L` line, a dmon or --query-gpu header, a table GPU
// row, or two lines that only -q prints. `nvidia-smi topo -m` is not this (see topo_text.h).
bool LooksLikeSmi(std::string_view text);

// Parses what it recognises; never fails; bounded memory (see the caps above).
SmiReport ParseSmiText(std::string_view text);

// The `smi` object of docs/format/explain.md, exactly (every key present, null where unknown).
// Strings are made valid UTF-8; whole numbers are JSON integers.
nlohmann::json SmiReportJson(const SmiReport& r);

}  // namespace gpuwatch::collect
