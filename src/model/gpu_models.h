// The GPU models the two simulators play — the mock NVML library (src/mock_nvml) and the
// cluster simulator behind `gpuwatch sim` (src/cluster_sim) — with their real names and limits
// as NVML reports them, so a simulated H100 is the same H100 in both.
//
// Header only and constexpr: the mock NVML library links no gpuwatch library (its shared object
// must carry nothing but the NVML symbols), so it includes this without linking gw_model.
// Immutable static data; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace gpuwatch::model {

enum class GpuArch : uint8_t { kAmpere, kAda, kHopper };

struct GpuModelSpec {
  std::string_view key;   // as written in a shape ("8xH100"), matched case-insensitively
  std::string_view name;  // nvmlDeviceGetName
  GpuArch arch;
  double memory_total_mib, memory_reserved_mib;
  double power_limit_w;  // the default power limit (TDP)
  double idle_power_w;   // drawn at 0 % with a CUDA context held
  double max_sm_clock_mhz, max_mem_clock_mhz, max_video_clock_mhz;
  unsigned pcie_gen, pcie_width;
  double pcie_kb_per_s;  // a busy link's throughput in the mock's default waves
  unsigned nvlink_count;
  unsigned nvlink_version;  // 0 without NVLink
  bool mig_capable;
  unsigned pci_device_id, pci_subsystem_id;
  std::string_view vbios_version;
  uint64_t serial_base;  // 0: the board reports no serial number (GeForce)
  double idle_temp_c;
  // What the board does not have, comma-separated feature names of the mock's capability list:
  // passive boards have no fan; only HBM parts report memory temperature; GeForce has no ECC and
  // no serial number; GPM is Hopper-only; MIG is A100/H100-only.
  std::string_view unsupported;
};

inline constexpr GpuModelSpec kGpuModels[] = {
    {"H100",
     "NVIDIA H100 80GB HBM3",
     GpuArch::kHopper,
     81559,
     579,
     700,
     70,
     1980,
     2619,
     1545,
     5,
     16,
     6.0e6,
     18,
     4,
     true,
     0x233010DE,
     0x16C110DE,
     "96.00.99.00.01",
     1654923000001ULL,
     38,
     "fan"},
    {"A100",
     "NVIDIA A100-SXM4-80GB",
     GpuArch::kAmpere,
     81920,
     567,
     400,
     55,
     1410,
     1593,
     1290,
     4,
     16,
     3.0e6,
     12,
     3,
     true,
     0x20B210DE,
     0x147F10DE,
     "92.00.45.00.03",
     1323321000001ULL,
     36,
     "fan,gpm"},
    {"4090",
     "NVIDIA GeForce RTX 4090",
     GpuArch::kAda,
     24564,
     327,
     450,
     30,
     3120,
     10501,
     2415,
     4,
     16,
     3.0e6,
     0,
     0,
     false,
     0x268410DE,
     0x16F310DE,
     "95.02.18.80.87",
     0,
     40,
     "mem_temp,ecc,gpm,mig,serial"},
    {"L40S",
     "NVIDIA L40S",
     GpuArch::kAda,
     46068,
     471,
     350,
     35,
     2520,
     9001,
     1965,
     4,
     16,
     3.0e6,
     0,
     0,
     false,
     0x26B910DE,
     0x185110DE,
     "95.02.4B.00.01",
     1325023000001ULL,
     34,
     "fan,mem_temp,gpm,mig"},
};

// "H100, A100, 4090 or L40S", for messages.
inline constexpr std::string_view kGpuModelList = "H100, A100, 4090 or L40S";

// The model whose key is `key` (any case), or nullptr.
constexpr const GpuModelSpec* GpuModelByKey(std::string_view key) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  for (const GpuModelSpec& m : kGpuModels) {
    if (m.key.size() != key.size()) continue;
    bool same = true;
    for (size_t i = 0; i < key.size() && same; ++i) same = lower(m.key[i]) == lower(key[i]);
    if (same) return &m;
  }
  return nullptr;
}

}  // namespace gpuwatch::model
