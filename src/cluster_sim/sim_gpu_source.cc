#include "cluster_sim/sim_gpu_source.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <utility>

#include "common/time_base.h"
#include "trace/trace_reader.h"

namespace gpuwatch::cluster_sim {
namespace {

using model::GpuMetric;

constexpr double kBytesPerMb = 1e6;  // the trace's MB/s is decimal
// A proc round older than this is no longer the present: the job (or the rank) is gone.
constexpr int64_t kProcStaleMs = 12000;
// A GPU whose newest record is older than this, while the node's records go on, is lost.
constexpr int64_t kLostAfterMs = 2500;

// The throttle names of the trace back to NVML's clock-event bits (model::ClockEventReasonNames
// read backwards).
uint64_t ThrottleMask(const std::vector<std::string>& names) {
  uint64_t mask = 0;
  for (uint64_t bit = 1; bit != 0 && bit <= 0x100; bit <<= 1) {
    const auto bit_names = model::ClockEventReasonNames(bit);
    if (bit_names.empty()) continue;
    if (std::find(names.begin(), names.end(), bit_names.front()) != names.end()) mask |= bit;
  }
  return mask;
}

void SetIf(model::GpuSample* s, GpuMetric m, const std::optional<double>& v, double scale = 1) {
  if (v && std::isfinite(*v)) s->Set(m, *v * scale);
}

}  // namespace

Result<std::unique_ptr<SimulatedGpuSource>> SimulatedGpuSource::Create(
    const std::vector<std::string>& lines, const std::string& node, int64_t offset_ms,
    std::map<uint32_t, uint32_t> pids) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  auto reader = trace::TraceReader::OpenBuffer(std::move(text), "simulated.jsonl");
  if (!reader.ok()) return reader.status();
  std::unique_ptr<SimulatedGpuSource> src(new SimulatedGpuSource());
  src->node_ = node;
  src->offset_ms_ = offset_ms;
  bool have_node = false;
  // Running NVLink byte counters, integrated from the records' MB/s.
  std::vector<double> nvlink_tx, nvlink_rx;
  std::vector<int64_t> prev_t;
  trace::TraceRecord r;
  while (true) {
    auto more = (*reader)->Next(&r);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (!have_node) {
      const auto* n = r.as<trace::TraceNode>();
      if (n == nullptr || (!node.empty() && r.node != node)) continue;
      if (!n->gpus || n->gpus->empty())
        return Status::InvalidArgument("simulated node '" + r.node + "' has no GPUs");
      have_node = true;
      src->node_ = r.node;
      src->system_.driver_version = "SIMULATED";
      src->system_.nvml_version = "SIMULATED";
      src->system_.cuda_driver_version = n->cuda_version.value_or("");
      src->system_.library_path = "(gpuwatch simulator)";
      for (const trace::TraceNodeGpu& g : *n->gpus) {
        model::GpuStaticInfo d;
        d.index = g.index.value_or(static_cast<uint32_t>(src->devices_.size()));
        d.uuid = g.uuid.value_or("");
        d.pci_bus_id = g.pci_bus_id.value_or("");
        d.name = g.name.value_or("GPU") + " [SIMULATED]";
        d.serial = "SIMULATED";
        d.vbios_version = "SIMULATED";
        d.minor_number = d.index;
        d.nvlink_count = g.nvlink_count.value_or(0);
        src->devices_.push_back(std::move(d));
        // The static half of every sample.
        model::GpuSample base;
        SetIf(&base, GpuMetric::kMemTotalMib, g.memory_total_mib);
        SetIf(&base, GpuMetric::kPowerLimitW, g.power_limit_w);
        SetIf(&base, GpuMetric::kMaxSmClockMhz, g.max_sm_clock_mhz);
        SetIf(&base, GpuMetric::kMaxMemClockMhz, g.max_mem_clock_mhz);
        SetIf(&base, GpuMetric::kPcieMaxGen, g.pcie_max_gen);
        SetIf(&base, GpuMetric::kPcieMaxWidth, g.pcie_max_width);
        src->frames_.push_back({{0, base}});  // the template; removed below
      }
      const size_t n_gpus = src->devices_.size();
      nvlink_tx.assign(n_gpus, 0);
      nvlink_rx.assign(n_gpus, 0);
      prev_t.assign(n_gpus, -1);
      continue;
    }
    if (r.node != src->node_) continue;
    const int64_t t_ms = r.t_ms;
    src->end_ms_ = std::max(src->end_ms_, t_ms);
    if (const auto* g = r.as<trace::TraceGpu>()) {
      if (!g->gpu || g->mig || *g->gpu >= src->frames_.size()) continue;
      const size_t i = *g->gpu;
      Frame f{t_ms, src->frames_[i].front().sample};
      model::GpuSample& s = f.sample;
      SetIf(&s, GpuMetric::kUtilGpuPct, g->util_pct);
      SetIf(&s, GpuMetric::kUtilMemPct, g->mem_util_pct);
      SetIf(&s, GpuMetric::kGpmSmActive, g->sm_active);
      SetIf(&s, GpuMetric::kGpmSmOccupancy, g->sm_occupancy);
      SetIf(&s, GpuMetric::kGpmTensorActive, g->tensor_active);
      SetIf(&s, GpuMetric::kGpmDramActive, g->dram_active);
      SetIf(&s, GpuMetric::kMemUsedMib, g->mem_used_mib);
      if (auto total = s.Get(GpuMetric::kMemTotalMib); total && g->mem_used_mib)
        s.Set(GpuMetric::kMemFreeMib, std::max(0.0, *total - *g->mem_used_mib));
      SetIf(&s, GpuMetric::kTempC, g->temp_c);
      SetIf(&s, GpuMetric::kMemTempC, g->mem_temp_c);
      SetIf(&s, GpuMetric::kPowerW, g->power_w);
      SetIf(&s, GpuMetric::kEnergyMj, g->energy_j, 1000.0);
      SetIf(&s, GpuMetric::kSmClockMhz, g->sm_clock_mhz);
      SetIf(&s, GpuMetric::kMemClockMhz, g->mem_clock_mhz);
      if (g->throttle)
        s.Set(GpuMetric::kClockEventReasons, static_cast<double>(ThrottleMask(*g->throttle)));
      SetIf(&s, GpuMetric::kFanPct, g->fan_pct);
      SetIf(&s, GpuMetric::kPcieTxBytesPerSec, g->pcie_tx_mbs, kBytesPerMb);
      SetIf(&s, GpuMetric::kPcieRxBytesPerSec, g->pcie_rx_mbs, kBytesPerMb);
      SetIf(&s, GpuMetric::kPcieGen, g->pcie_gen);
      SetIf(&s, GpuMetric::kPcieWidth, g->pcie_width);
      SetIf(&s, GpuMetric::kPcieReplay, g->pcie_replay);
      if (g->nvlink_tx_mbs || g->nvlink_rx_mbs) {
        const double dt_s = prev_t[i] < 0 ? 0 : (t_ms - prev_t[i]) / 1000.0;
        nvlink_tx[i] += g->nvlink_tx_mbs.value_or(0) * kBytesPerMb * dt_s;
        nvlink_rx[i] += g->nvlink_rx_mbs.value_or(0) * kBytesPerMb * dt_s;
        s.Set(GpuMetric::kNvlinkTxBytes, nvlink_tx[i]);
        s.Set(GpuMetric::kNvlinkRxBytes, nvlink_rx[i]);
      }
      SetIf(&s, GpuMetric::kNvlinkActiveLinks, g->nvlink_active_links);
      // The trace sums flit and data CRC errors; the simulator makes flit errors only.
      SetIf(&s, GpuMetric::kNvlinkCrcFlitErrors, g->nvlink_crc_errors);
      if (g->nvlink_crc_errors) s.Set(GpuMetric::kNvlinkCrcDataErrors, 0);
      SetIf(&s, GpuMetric::kNvlinkReplayErrors, g->nvlink_replay);
      SetIf(&s, GpuMetric::kNvlinkRecoveryErrors, g->nvlink_recovery);
      SetIf(&s, GpuMetric::kEccSbeVolatile, g->ecc_sbe_volatile);
      SetIf(&s, GpuMetric::kEccDbeVolatile, g->ecc_dbe_volatile);
      SetIf(&s, GpuMetric::kRetiredPagesSbe, g->retired_pages);  // the trace keeps the sum
      if (g->remapped_rows_pending)
        s.Set(GpuMetric::kRemappedRowsPending, *g->remapped_rows_pending ? 1 : 0);
      if (g->remapped_rows_failure)
        s.Set(GpuMetric::kRemappedRowsFailure, *g->remapped_rows_failure ? 1 : 0);
      prev_t[i] = t_ms;
      src->frames_[i].push_back(std::move(f));
    } else if (const auto* p = r.as<trace::TraceProc>()) {
      if (!p->pid || !p->gpu) continue;
      auto real = pids.find(*p->pid);
      if (real == pids.end()) continue;
      if (src->procs_.empty() || src->procs_.back().t_ms != t_ms) src->procs_.push_back({t_ms, {}});
      model::GpuProcess gp;
      gp.pid = real->second;
      if (p->mem_used_mib) gp.used_memory_bytes = static_cast<uint64_t>(*p->mem_used_mib * 1048576);
      src->procs_.back().procs.push_back({*p->gpu, gp});
    } else if (const auto* e = r.as<trace::TraceEvent>()) {
      if (e->kind != "xid" || !e->gpu || *e->gpu >= src->devices_.size()) continue;
      model::GpuEvent ev;
      ev.time_ms = t_ms + offset_ms;
      ev.kind = model::GpuEventKind::kXid;
      ev.gpu_index = *e->gpu;
      ev.uuid = src->devices_[*e->gpu].uuid;
      ev.pci_bus_id = src->devices_[*e->gpu].pci_bus_id;
      ev.code = static_cast<uint64_t>(e->code.value_or(0));
      ev.text = e->message.value_or("");
      src->events_.push_back(std::move(ev));
    }
  }
  if (!have_node) {
    return Status::NotFound(node.empty() ? std::string("the simulated trace has no node record")
                                         : "the simulated trace has no node '" + node + "'");
  }
  src->caps_.resize(src->devices_.size());
  for (size_t i = 0; i < src->frames_.size(); ++i) {
    auto& frames = src->frames_[i];
    frames.erase(frames.begin());  // the static template
    model::GpuCapabilities& caps = src->caps_[i];
    // What a GPU can measure is what its first record holds; the rest is unsupported, as NVML
    // would say of a field the card lacks.
    const model::GpuSample* first = frames.empty() ? nullptr : &frames.front().sample;
    for (size_t m = 0; m < model::kNumGpuMetrics; ++m) {
      const bool has = first != nullptr && first->valid.test(m);
      caps.metrics[m] = has ? model::Capability{model::Support::kSupported, ""}
                            : model::Capability{model::Support::kNotSupported, "not simulated"};
    }
    caps.features[static_cast<size_t>(model::GpuFeature::kProcesses)] = {model::Support::kSupported,
                                                                         ""};
    caps.features[static_cast<size_t>(model::GpuFeature::kXidEvents)] = {model::Support::kSupported,
                                                                         ""};
    for (auto f :
         {model::GpuFeature::kNvlinkPerLink, model::GpuFeature::kMig, model::GpuFeature::kGpm}) {
      caps.features[static_cast<size_t>(f)] = {model::Support::kNotSupported, "not simulated"};
    }
  }
  std::stable_sort(src->events_.begin(), src->events_.end(),
                   [](const auto& a, const auto& b) { return a.time_ms < b.time_ms; });
  return src;
}

model::GpuCapabilities SimulatedGpuSource::Capabilities(size_t index) const {
  return index < caps_.size() ? caps_[index] : model::GpuCapabilities{};
}

Status SimulatedGpuSource::Sample(size_t index, int64_t time_ms, model::GpuSample* out) {
  if (index >= frames_.size()) return Status::InvalidArgument("no GPU " + std::to_string(index));
  const std::vector<Frame>& frames = frames_[index];
  const int64_t t = time_ms - offset_ms_;
  auto it = std::upper_bound(frames.begin(), frames.end(), t,
                             [](int64_t v, const Frame& f) { return v < f.t_ms; });
  if (it == frames.begin()) {
    // Before the simulation starts: an idle card (the first record, at rest).
    *out = frames.empty() ? model::GpuSample{} : frames.front().sample;
    out->time_ms = time_ms;
    return Status::Ok();
  }
  const Frame& f = *std::prev(it);
  // Records stopped while the node's went on: the GPU fell off the bus, for good.
  if (t - f.t_ms > kLostAfterMs && f.t_ms < end_ms_ - kLostAfterMs) {
    *out = model::GpuSample{};
    out->time_ms = time_ms;
    out->lost = true;
    return Status::GpuLost("simulated GPU " + std::to_string(index) + " fell off the bus");
  }
  *out = f.sample;
  out->time_ms = time_ms;
  return Status::Ok();
}

Status SimulatedGpuSource::Processes(size_t index, std::vector<model::GpuProcess>* out) {
  if (index >= frames_.size()) return Status::InvalidArgument("no GPU " + std::to_string(index));
  const int64_t t = WallClockMs() - offset_ms_;
  auto it = std::upper_bound(procs_.begin(), procs_.end(), t,
                             [](int64_t v, const ProcRound& r) { return v < r.t_ms; });
  if (it == procs_.begin()) return Status::Ok();
  const ProcRound& round = *std::prev(it);
  if (t - round.t_ms > kProcStaleMs) return Status::Ok();
  for (const auto& [gpu, p] : round.procs) {
    if (gpu == index) out->push_back(p);
  }
  return Status::Ok();
}

Status SimulatedGpuSource::WaitEvents(int timeout_ms, int64_t now_ms,
                                      std::vector<model::GpuEvent>* out) {
  int64_t until = now_ms;
  if (next_event_ < events_.size() && events_[next_event_].time_ms > now_ms && timeout_ms > 0) {
    // Sleep until the next event is due, or the timeout.
    const int64_t wait_ms = std::min<int64_t>(timeout_ms, events_[next_event_].time_ms - now_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    until = now_ms + wait_ms;
  } else if (next_event_ >= events_.size() && timeout_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  }
  while (next_event_ < events_.size() && events_[next_event_].time_ms <= until) {
    out->push_back(events_[next_event_++]);
  }
  return Status::Ok();
}

}  // namespace gpuwatch::cluster_sim
