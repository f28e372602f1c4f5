// The metric catalog: the one list of every series gpuwatch exports, from which the
// /metrics exposition, docs/metrics.md and the capability list are all derived.
//
// Names follow NVIDIA dcgm-exporter where a counterpart exists (so its Grafana dashboards work
// unchanged) and gpuwatch_* elsewhere. Immutable static data; thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "model/gpu.h"

namespace gpuwatch::model {

enum class MetricType { kGauge, kCounter, kInfo };
std::string_view MetricTypeName(MetricType t);  // as in the Prometheus "# TYPE" line
// The "# TYPE" of `name` on /metrics. Prometheus's naming rules (promtool check metrics)
// reserve `counter` for names ending in `_total`; dcgm-exporter's counter names (…_VOL_TOTAL,
// …_TOTAL_ENERGY_CONSUMPTION) are kept for its dashboards and exposed `untyped` instead —
// rate() and increase() treat them the same.
std::string_view ExpositionTypeName(std::string_view name, MetricType t);

struct GpuMetricDesc {
  GpuMetric id;
  std::string_view name;  // exposition name
  MetricType type;
  std::string_view unit;         // unit of the exported value
  double export_scale;           // exported = stored * export_scale
  std::string_view trace_field;  // trace-format field name, "" if none
  std::string_view nvml_source;  // where the value comes from
  std::string_view help;
};

// Indexed by GpuMetric; catalog[i].id == GpuMetric(i) (checked by a test).
std::span<const GpuMetricDesc> GpuMetricCatalog();
const GpuMetricDesc& Describe(GpuMetric m);

// Series that are not one-scalar-per-GPU (per link, per process, per XID, host, agent).
struct OtherMetricDesc {
  std::string_view name;
  MetricType type;
  std::string_view labels;  // beyond the GPU labels, comma-separated
  std::string_view help;
};
std::span<const OtherMetricDesc> OtherMetricCatalog();
const OtherMetricDesc& DescribeOther(std::string_view name);

// The labels every per-GPU series carries (dcgm-exporter's set).
inline constexpr std::string_view kGpuLabelNames =
    "gpu, UUID, pci_bus_id, device, model_name, Hostname, DCGM_FI_DRIVER_VERSION";
// dcgm-exporter calls the model label `modelName`; Prometheus's naming rules (promtool check
// metrics) reject camelCase label names, so gpuwatch says `model_name` unless
// `--model-label modelName` asks for dcgm-exporter's spelling.

// docs/metrics.md, generated (a test keeps the checked-in file equal to this).
std::string RenderMetricsMarkdown();

}  // namespace gpuwatch::model
