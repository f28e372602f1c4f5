#include "server/node_collector.h"

#include <strings.h>

#include <algorithm>
#include <chrono>

#include "trace/trace_writer.h"

namespace gpuwatch::server {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What the node record says of placement and wiring (trace format: numa_node, cpu_affinity,
// topology.gpu_links, nics), from the last topology snapshot.
void AddTopologyExtras(const topo::NodeSnapshot& t, trace::NodeExtras* extras) {
  for (trace::NodeGpuExtra& e : extras->gpus) {
    for (const topo::GpuFacts& g : t.gpus) {
      if (g.index != e.index) continue;
      e.numa_node = g.numa_node;
      e.cpu_affinity = g.cpu_affinity.value_or("");
    }
  }
  bool complete = !t.matrix.gpu_links.empty();
  for (const auto& row : t.matrix.gpu_links)
    for (const auto& cell : row) complete &= !cell.empty();
  if (complete) extras->gpu_links = t.matrix.gpu_links;  // a cell we could not read is not "X"
  for (const topo::NicFacts& n : t.nics) {
    trace::NodeNic nic;
    nic.name = n.name;
    nic.pci_bus_id = n.pci_bus_id;
    nic.numa_node = n.numa_node;
    for (const auto& p : n.ports) {
      if (nic.type.empty() && !p.link_layer.empty())
        nic.type = p.link_layer == "InfiniBand" ? "ib" : "eth";
      if (p.rate_gbps) nic.link_gbps = std::max(nic.link_gbps.value_or(0), *p.rate_gbps);
    }
    extras->nics.push_back(std::move(nic));
  }
}

const std::vector<model::GpuStaticInfo> kNoDevices;

}  // namespace

NodeCollector::NodeCollector(NodeCollectorOptions options, std::unique_ptr<collect::GpuSource> gpu)
    : options_(std::move(options)),
      gpu_(std::move(gpu)),
      host_(options_.root_dir),
      attributor_(options_.root_dir, options_.job_env_var) {}

Status NodeCollector::Init() {
  if (!gpu_) return Status::Unavailable("no GPU backend configured");
  if (Status st = gpu_->Init(); !st.ok()) return st;
  gpu_ready_ = true;
  return Status::Ok();
}

const std::vector<model::GpuStaticInfo>& NodeCollector::devices() const {
  return gpu_ready_ ? gpu_->Devices() : kNoDevices;
}

const model::GpuStaticInfo* NodeCollector::DeviceByBusId(std::string_view pci_bus_id) const {
  const std::string id(pci_bus_id);
  for (const auto& d : devices())
    if (strcasecmp(d.pci_bus_id.c_str(), id.c_str()) == 0) return &d;
  return nullptr;
}

const model::GpuStaticInfo* NodeCollector::DeviceByMinor(unsigned minor) const {
  for (const auto& d : devices())
    if (d.minor_number && *d.minor_number == minor) return &d;
  return nullptr;
}

GpuTick NodeCollector::SampleGpus(int64_t now_ms, const topo::NodeSnapshot* topology) {
  const auto start = Clock::now();
  const auto& devs = gpu_->Devices();
  const size_t n = devs.size();
  GpuTick tick;
  tick.samples.resize(n);
  tick.caps.resize(n);
  gpu_lost_.resize(n, false);
  for (size_t i = 0; i < n; ++i) {
    Status st = gpu_->Sample(i, now_ms, &tick.samples[i]);
    tick.caps[i] = gpu_->Capabilities(i);
    // A GPU that stops (or starts again) answering is one event at the transition, from any
    // GpuSource — never one per tick.
    if (tick.samples[i].lost != gpu_lost_[i]) {
      gpu_lost_[i] = tick.samples[i].lost;
      model::GpuEvent e;
      e.time_ms = now_ms;
      e.kind =
          tick.samples[i].lost ? model::GpuEventKind::kGpuLost : model::GpuEventKind::kGpuRecovered;
      e.gpu_index = static_cast<unsigned>(i);
      e.uuid = devs[i].uuid;
      e.pci_bus_id = devs[i].pci_bus_id;
      e.text = tick.samples[i].lost ? st.message() : "GPU answers again";
      e.source = std::string(gpu_->Name());
      tick.events.push_back(std::move(e));
    }
  }
  tick.read_seconds = SecondsSince(start);
  // Trace form: a node record first and every node_record_interval_ms (it carries the limits a
  // sample knows), then one gpu record per GPU.
  prev_gpu_samples_.resize(n);
  if (node_record_ms_ == 0 || now_ms - node_record_ms_ >= options_.node_record_interval_ms) {
    node_record_ms_ = now_ms;
    trace::NodeExtras extras;
    for (size_t i = 0; i < n; ++i)
      extras.gpus.push_back(trace::NodeGpuExtraFromSample(devs[i].index, tick.samples[i]));
    if (topology) AddTopologyExtras(*topology, &extras);
    // The time daemon's measured offset (local minus reference) when it gave one; else
    // adjtimex's, negated: the kernel holds the correction still to apply (positive = clock
    // behind), the opposite sign.
    if (prev_host_ && prev_host_->time_source_offset_ms)
      extras.clock_offset_ms = prev_host_->time_source_offset_ms;
    else if (prev_host_ && prev_host_->clock_offset_ms)
      extras.clock_offset_ms = 0.0 - *prev_host_->clock_offset_ms;
    tick.records.push_back(
        {now_ms, trace::NodeRecord(now_ms, options_.hostname, gpu_->System(), devs, extras)});
  }
  for (size_t i = 0; i < n; ++i) {
    const model::GpuSample& s = tick.samples[i];
    if (s.time_ms == 0) continue;
    const model::GpuSample* prev =
        prev_gpu_samples_[i].time_ms != 0 ? &prev_gpu_samples_[i] : nullptr;
    tick.records.push_back(
        {s.time_ms, trace::GpuRecord(options_.hostname, devs[i].index, s, prev)});
    for (auto& m : trace::MigRecords(options_.hostname, devs[i].index, s))
      tick.records.push_back({s.time_ms, std::move(m)});
    prev_gpu_samples_[i] = s;
  }
  tick.link_rates = link_rates_.UpdateGpus(devs, tick.samples, topology);
  return tick;
}

HostTick NodeCollector::SampleHost(int64_t now_ms) {
  const auto start = Clock::now();
  HostTick tick;
  tick.status = host_.Collect(now_ms, &tick.sample);
  tick.read_seconds = SecondsSince(start);
  if (!tick.status.ok()) return tick;
  tick.record = {tick.sample.time_ms, trace::HostRecord(options_.hostname, tick.sample,
                                                        prev_host_ ? &*prev_host_ : nullptr)};
  prev_host_ = tick.sample;
  tick.link_rates = link_rates_.UpdateHost(tick.sample, &tick.vanished);
  return tick;
}

std::vector<model::ProcessAttribution> NodeCollector::Attribute() {
  std::vector<collect::GpuProcessRef> refs;
  const auto& devs = gpu_->Devices();
  for (size_t i = 0; i < devs.size(); ++i) {
    std::vector<model::GpuProcess> procs;
    if (!gpu_->Processes(i, &procs).ok()) continue;
    for (auto& p : procs) refs.push_back({static_cast<unsigned>(i), p});
  }
  return attributor_.Attribute(refs, devs);
}

std::vector<model::GpuEvent> NodeCollector::WaitEvents(int timeout_ms, int64_t now_ms) {
  std::vector<model::GpuEvent> events;
  if (gpu_ready_) gpu_->WaitEvents(timeout_ms, now_ms, &events).IgnoreError();
  return events;
}

}  // namespace gpuwatch::server
