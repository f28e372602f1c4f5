#include "model/metric_catalog.h"

#include <fmt/format.h>

#include <array>
#include <cstdlib>

namespace gpuwatch::model {
namespace {

using G = GpuMetric;
constexpr MetricType kG = MetricType::kGauge;
constexpr MetricType kC = MetricType::kCounter;

// clang-format off
constexpr std::array<GpuMetricDesc, kNumGpuMetrics> kGpu = {{
  {G::kUtilGpuPct, "DCGM_FI_DEV_GPU_UTIL", kG, "%", 1, "util_pct", "nvmlDeviceGetUtilizationRates.gpu", "GPU utilization: percent of time one or more kernels ran."},
  {G::kUtilMemPct, "DCGM_FI_DEV_MEM_COPY_UTIL", kG, "%", 1, "mem_util_pct", "nvmlDeviceGetUtilizationRates.memory", "Memory utilization: percent of time device memory was read or written."},
  {G::kMemUsedMib, "DCGM_FI_DEV_FB_USED", kG, "MiB", 1, "mem_used_mib", "nvmlDeviceGetMemoryInfo(_v2).used", "Framebuffer memory used."},
  {G::kMemFreeMib, "DCGM_FI_DEV_FB_FREE", kG, "MiB", 1, "", "nvmlDeviceGetMemoryInfo(_v2).free", "Framebuffer memory free."},
  {G::kMemTotalMib, "DCGM_FI_DEV_FB_TOTAL", kG, "MiB", 1, "", "nvmlDeviceGetMemoryInfo(_v2).total", "Framebuffer memory total."},
  {G::kMemReservedMib, "DCGM_FI_DEV_FB_RESERVED", kG, "MiB", 1, "", "nvmlDeviceGetMemoryInfo_v2.reserved", "Framebuffer memory reserved by the driver and firmware."},
  {G::kTempC, "DCGM_FI_DEV_GPU_TEMP", kG, "C", 1, "temp_c", "nvmlDeviceGetTemperature(GPU)", "GPU die temperature."},
  {G::kMemTempC, "DCGM_FI_DEV_MEMORY_TEMP", kG, "C", 1, "mem_temp_c", "field NVML_FI_DEV_MEMORY_TEMP", "HBM memory temperature."},
  {G::kPowerW, "DCGM_FI_DEV_POWER_USAGE", kG, "W", 1, "power_w", "nvmlDeviceGetPowerUsage", "Power draw."},
  {G::kPowerLimitW, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", kG, "W", 1, "", "nvmlDeviceGetEnforcedPowerLimit", "Enforced power limit."},
  {G::kEnergyMj, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", kC, "mJ", 1, "energy_j", "nvmlDeviceGetTotalEnergyConsumption", "Energy consumed since the driver was loaded."},
  {G::kSmClockMhz, "DCGM_FI_DEV_SM_CLOCK", kG, "MHz", 1, "sm_clock_mhz", "nvmlDeviceGetClockInfo(SM)", "SM clock."},
  {G::kMemClockMhz, "DCGM_FI_DEV_MEM_CLOCK", kG, "MHz", 1, "mem_clock_mhz", "nvmlDeviceGetClockInfo(MEM)", "Memory clock."},
  {G::kMaxSmClockMhz, "DCGM_FI_DEV_MAX_SM_CLOCK", kG, "MHz", 1, "", "nvmlDeviceGetMaxClockInfo(SM)", "Maximum SM clock."},
  {G::kMaxMemClockMhz, "DCGM_FI_DEV_MAX_MEM_CLOCK", kG, "MHz", 1, "", "nvmlDeviceGetMaxClockInfo(MEM)", "Maximum memory clock."},
  {G::kClockEventReasons, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", kG, "bitmask", 1, "throttle", "nvmlDeviceGetCurrentClocksEventReasons", "Active clock-event (throttle) reasons as NVML's bitmask; see gpuwatch_clock_event_reason_active for each reason by name."},
  {G::kEccSbeVolatile, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", kC, "errors", 1, "ecc_sbe_volatile", "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)", "Single-bit (corrected) ECC errors since the last driver load."},
  {G::kEccDbeVolatile, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", kC, "errors", 1, "ecc_dbe_volatile", "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)", "Double-bit (uncorrected) ECC errors since the last driver load."},
  {G::kEccSbeAggregate, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", kC, "errors", 1, "", "nvmlDeviceGetTotalEccErrors(CORRECTED, AGGREGATE)", "Single-bit ECC errors over the life of the GPU."},
  {G::kEccDbeAggregate, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", kC, "errors", 1, "", "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE)", "Double-bit ECC errors over the life of the GPU."},
  {G::kRetiredPagesSbe, "DCGM_FI_DEV_RETIRED_SBE", kG, "pages", 1, "retired_pages", "field NVML_FI_DEV_RETIRED_SBE", "Pages retired for multiple single-bit errors (pre-Ampere)."},
  {G::kRetiredPagesDbe, "DCGM_FI_DEV_RETIRED_DBE", kG, "pages", 1, "", "field NVML_FI_DEV_RETIRED_DBE", "Pages retired for a double-bit error (pre-Ampere)."},
  {G::kRetiredPagesPending, "DCGM_FI_DEV_RETIRED_PENDING", kG, "bool", 1, "", "nvmlDeviceGetRetiredPagesPendingStatus", "1 when a page retirement waits for the next driver reload."},
  {G::kRemappedRowsCorrectable, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", kG, "rows", 1, "", "nvmlDeviceGetRemappedRows.corrRows", "Rows remapped for correctable errors (Ampere+)."},
  {G::kRemappedRowsUncorrectable, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", kG, "rows", 1, "", "nvmlDeviceGetRemappedRows.uncRows", "Rows remapped for uncorrectable errors (Ampere+)."},
  {G::kRemappedRowsPending, "gpuwatch_remapped_rows_pending", kG, "bool", 1, "remapped_rows_pending", "nvmlDeviceGetRemappedRows.isPending", "1 when a row remap waits for a GPU reset."},
  {G::kRemappedRowsFailure, "DCGM_FI_DEV_ROW_REMAP_FAILURE", kG, "bool", 1, "remapped_rows_failure", "nvmlDeviceGetRemappedRows.failureOccurred", "1 when a row remap failed: the GPU needs service."},
  {G::kPcieTxBytesPerSec, "gpuwatch_pcie_tx_bytes_per_second", kG, "B/s", 1, "pcie_tx_mbs", "nvmlDeviceGetPcieThroughput(TX) (20 ms window)", "PCIe transmit throughput."},
  {G::kPcieRxBytesPerSec, "gpuwatch_pcie_rx_bytes_per_second", kG, "B/s", 1, "pcie_rx_mbs", "nvmlDeviceGetPcieThroughput(RX) (20 ms window)", "PCIe receive throughput."},
  {G::kPcieReplay, "gpuwatch_pcie_replays_total", kC, "replays", 1, "pcie_replay", "nvmlDeviceGetPcieReplayCounter", "PCIe replays (link-level retransmissions). dcgm-exporter calls it DCGM_FI_DEV_PCIE_REPLAY_COUNTER, a name Prometheus's naming rules reject (a type in the name)."},
  {G::kPcieGen, "DCGM_FI_DEV_PCIE_LINK_GEN", kG, "gen", 1, "pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", "Current PCIe link generation (drops when idle by design)."},
  {G::kPcieWidth, "DCGM_FI_DEV_PCIE_LINK_WIDTH", kG, "lanes", 1, "pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", "Current PCIe link width."},
  {G::kPcieMaxGen, "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", kG, "gen", 1, "", "nvmlDeviceGetMaxPcieLinkGeneration", "Maximum PCIe link generation of the GPU and slot."},
  {G::kPcieMaxWidth, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", kG, "lanes", 1, "", "nvmlDeviceGetMaxPcieLinkWidth", "Maximum PCIe link width."},
  {G::kFanPct, "DCGM_FI_DEV_FAN_SPEED", kG, "%", 1, "fan_pct", "nvmlDeviceGetFanSpeed", "Fan speed as percent of maximum (absent on passively cooled boards)."},
  {G::kNvlinkActiveLinks, "gpuwatch_nvlink_active_links", kG, "links", 1, "nvlink_active_links", "nvmlDeviceGetNvLinkState", "NVLinks in the active state."},
  {G::kNvlinkCrcFlitErrors, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", kC, "errors", 1, "nvlink_crc_errors", "nvmlDeviceGetNvLinkErrorCounter(CRC_FLIT), all links", "NVLink flow-control CRC errors, all links."},
  {G::kNvlinkCrcDataErrors, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", kC, "errors", 1, "", "nvmlDeviceGetNvLinkErrorCounter(CRC_DATA), all links", "NVLink data CRC errors, all links."},
  {G::kNvlinkReplayErrors, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", kC, "errors", 1, "nvlink_replay", "nvmlDeviceGetNvLinkErrorCounter(REPLAY), all links", "NVLink replays, all links."},
  {G::kNvlinkRecoveryErrors, "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", kC, "errors", 1, "nvlink_recovery", "nvmlDeviceGetNvLinkErrorCounter(RECOVERY), all links", "NVLink recoveries, all links."},
  {G::kNvlinkTxBytes, "gpuwatch_nvlink_tx_bytes_total", kC, "B", 1, "nvlink_tx_mbs", "field NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX (KiB), all links", "NVLink data bytes transmitted, all links."},
  {G::kNvlinkRxBytes, "gpuwatch_nvlink_rx_bytes_total", kC, "B", 1, "nvlink_rx_mbs", "field NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX (KiB), all links", "NVLink data bytes received, all links."},
  {G::kGpmGraphicsActive, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", kG, "ratio", 1, "", "GPM NVML_GPM_METRIC_GRAPHICS_UTIL", "Graphics/compute engine active ratio (Hopper+, GPM)."},
  {G::kGpmSmActive, "DCGM_FI_PROF_SM_ACTIVE", kG, "ratio", 1, "sm_active", "GPM NVML_GPM_METRIC_SM_UTIL", "Ratio of cycles an SM had at least one warp resident (Hopper+, GPM)."},
  {G::kGpmSmOccupancy, "DCGM_FI_PROF_SM_OCCUPANCY", kG, "ratio", 1, "sm_occupancy", "GPM NVML_GPM_METRIC_SM_OCCUPANCY", "Resident warps over the SM maximum (Hopper+, GPM)."},
  {G::kGpmTensorActive, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", kG, "ratio", 1, "tensor_active", "GPM NVML_GPM_METRIC_ANY_TENSOR_UTIL", "Ratio of cycles a tensor pipe was active (Hopper+, GPM)."},
  {G::kGpmDramActive, "DCGM_FI_PROF_DRAM_ACTIVE", kG, "ratio", 1, "dram_active", "GPM NVML_GPM_METRIC_DRAM_BW_UTIL", "Ratio of cycles the device memory interface was active (Hopper+, GPM)."},
}};

constexpr MetricType kI = MetricType::kInfo;
constexpr std::array<OtherMetricDesc, 105> kOther = {{
  // GPU, beyond scalars.
  {"gpuwatch_gpu_info", kI, "serial, vbios_version, minor_number, mig_mode", "Static facts of a GPU; value 1."},
  {"gpuwatch_gpu_up", kG, "", "1 while the GPU answers NVML, 0 after it was lost (XID 79, GPU_IS_LOST)."},
  {"gpuwatch_clock_event_reason_active", kG, "reason", "1 while the named clock-event (throttle) reason is active: sw_power_cap, hw_slowdown, hw_thermal, sw_thermal, hw_power_brake, sync_boost, idle, app_clocks, display_clocks."},
  {"gpuwatch_nvlink_link_up", kG, "link", "1 when this NVLink is active."},
  {"gpuwatch_nvlink_link_errors_total", kC, "link, counter", "Per-link NVLink error counters: counter = crc_flit, crc_data, replay, recovery."},
  {"gpuwatch_nvlink_link_tx_bytes_total", kC, "link", "Per-link NVLink data bytes transmitted."},
  {"gpuwatch_nvlink_link_rx_bytes_total", kC, "link", "Per-link NVLink data bytes received."},
  {"gpuwatch_xid_errors_total", kC, "xid", "XID errors reported for this GPU, by XID code: a counter, so repeats are never hidden."},
  {"DCGM_FI_DEV_XID_ERRORS", kG, "", "Code of the last XID error seen (dcgm-exporter compatible; use gpuwatch_xid_errors_total for counts)."},
  {"gpuwatch_mig_memory_used_bytes", kG, "GPU_I_ID, GPU_I_PROFILE, mig_uuid", "Memory used by a MIG instance."},
  {"gpuwatch_mig_memory_total_bytes", kG, "GPU_I_ID, GPU_I_PROFILE, mig_uuid", "Memory of a MIG instance."},
  {"gpuwatch_mig_sm_active", kG, "GPU_I_ID, GPU_I_PROFILE, mig_uuid", "SM activity of a MIG instance (GPM)."},
  // Attribution.
  {"gpuwatch_gpu_attribution_info", kI, "user, job, container", "Who uses a GPU now; value 1. Join on UUID in PromQL (one series per user/job/container on the GPU)."},
  {"gpuwatch_process_numa_mismatch", kG, "pid, command, job, cpu_numa_nodes, gpu_numa_node", "1 when the process's CPU affinity excludes its GPU's NUMA node (R11): host-GPU traffic crosses sockets."},
  {"gpuwatch_process_gpu_memory_bytes", kG, "pid, command, user, container, pod_uid, job, visible_index, GPU_I_ID", "GPU memory used by one process on one GPU."},
  // Host.
  {"gpuwatch_host_cpu_seconds_total", kC, "Hostname, mode", "CPU time over all CPUs by mode (user+nice+system+irq+softirq+steal as busy, idle, iowait)."},
  {"gpuwatch_host_cpu_utilization_percent", kG, "Hostname", "CPU busy percent over all CPUs, between two host ticks."},
  {"gpuwatch_host_cpu_iowait_percent", kG, "Hostname", "CPU iowait percent over all CPUs, between two host ticks."},
  {"gpuwatch_host_cpus", kG, "Hostname", "Online CPUs."},
  {"gpuwatch_host_memory_total_bytes", kG, "Hostname", "MemTotal."},
  {"gpuwatch_host_memory_available_bytes", kG, "Hostname", "MemAvailable."},
  {"gpuwatch_host_memory_used_bytes", kG, "Hostname", "MemTotal - MemAvailable."},
  {"gpuwatch_host_swap_used_bytes", kG, "Hostname", "SwapTotal - SwapFree."},
  {"gpuwatch_host_clock_offset_seconds", kG, "Hostname", "Clock offset the kernel is still slewing out (adjtimex; R7), positive while it advances a clock that is behind. Not the measured offset: chronyd does not use the kernel's PLL, so under chrony this stays near 0; see gpuwatch_host_time_source_offset_seconds."},
  {"gpuwatch_host_clock_max_error_seconds", kG, "Hostname", "The kernel's maximum clock error bound (adjtimex maxerror)."},
  {"gpuwatch_host_clock_synced", kG, "Hostname", "1 while a time source (NTP, PTP, chrony) keeps the clock synchronized, 0 when unsynchronized."},
  {"gpuwatch_host_time_source_offset_seconds", kG, "Hostname, source", "This node's clock minus its time source's, as the time daemon measured it (R7): positive = this clock is ahead. source = chrony (chronyc tracking), ntpd (ntpq rv) or timesyncd; read at most once a minute. Absent while the daemon is unsynchronised or reports no offset (timesyncd)."},
  {"gpuwatch_host_time_source_synced", kG, "Hostname, source", "1 while the time daemon that answered considers the clock synchronised (leap status not unsynchronised, stratum below 16), 0 otherwise."},
  {"gpuwatch_host_load1", kG, "Hostname", "1-minute load average."},
  {"gpuwatch_host_load5", kG, "Hostname", "5-minute load average."},
  {"gpuwatch_host_load15", kG, "Hostname", "15-minute load average."},
  {"gpuwatch_nic_receive_bytes_total", kC, "Hostname, interface", "Bytes received (/proc/net/dev)."},
  {"gpuwatch_nic_transmit_bytes_total", kC, "Hostname, interface", "Bytes transmitted (/proc/net/dev)."},
  {"gpuwatch_nic_errors_total", kC, "Hostname, interface, direction", "Receive/transmit errors (/proc/net/dev)."},
  {"gpuwatch_nic_dropped_total", kC, "Hostname, interface, direction", "Receive/transmit drops (/proc/net/dev)."},
  {"gpuwatch_nic_up", kG, "Hostname, interface", "1 when operstate is up."},
  {"gpuwatch_ib_port_receive_bytes_total", kC, "Hostname, device, port", "InfiniBand/RoCE port bytes received (port_rcv_data x 4)."},
  {"gpuwatch_ib_port_transmit_bytes_total", kC, "Hostname, device, port", "InfiniBand/RoCE port bytes transmitted (port_xmit_data x 4)."},
  {"gpuwatch_ib_port_errors_total", kC, "Hostname, device, port, counter", "Port error counters: symbol_error, port_rcv_errors, link_downed, link_error_recovery, port_xmit_discards; RDMA retransmission counters (hw_counters): local_ack_timeout_err, out_of_sequence, packet_seq_err, rnr_nak_retry_err, implied_nak_seq_err."},
  {"gpuwatch_ib_port_congestion_total", kC, "Hostname, device, port, counter", "Congestion counters: port_xmit_wait (ticks a packet waited to be sent), and for RoCE np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled (ECN marks and congestion notifications)."},
  {"gpuwatch_ib_port_up", kG, "Hostname, device, port, link_layer", "1 when the port state is ACTIVE."},
  {"gpuwatch_ib_port_rate_gbps", kG, "Hostname, device, port", "Port rate in Gb/s."},
  // Link rates (R10, R12): computed by the agent between ticks, counter resets handled.
  {"gpuwatch_link_bytes_per_second", kG, "Hostname, link_type, and per link_type: interface (nic); device, port (ib_port); gpu, UUID, link (nvlink); gpu, UUID, peer (nvlink_peer); gpu, UUID (pcie); direction", "Throughput of a link, rx or tx: NIC and IB port bytes, NVLink data bytes per link and per far end (peer GPUn or nvswitch), PCIe (NVML's 20 ms window)."},
  {"gpuwatch_link_rated_bytes_per_second", kG, "Hostname, link_type, and per link_type: interface (nic); device, port (ib_port); gpu, UUID, link (nvlink); gpu, UUID, peer (nvlink_peer); gpu, UUID (pcie)", "What the link can carry per direction: NIC speed, IB port rate, NVLink by generation (20/25/25/25/50 GB/s for NVLink1-5), PCIe by current generation and width."},
  {"gpuwatch_link_utilization_ratio", kG, "Hostname, link_type, and per link_type: interface (nic); device, port (ib_port); gpu, UUID, link (nvlink); gpu, UUID, peer (nvlink_peer); gpu, UUID (pcie); direction", "Throughput over rated bandwidth, 0..1."},
  {"gpuwatch_link_errors_per_second", kG, "Hostname, link_type, and per link_type: interface (nic); device, port (ib_port); gpu, UUID, link (nvlink); gpu, UUID, peer (nvlink_peer); gpu, UUID (pcie)", "Error counters' rate: NIC rx+tx errors, IB symbol+receive errors, NVLink CRC+replay+recovery."},
  {"gpuwatch_link_drops_per_second", kG, "Hostname, link_type, and per link_type: interface (nic); device, port (ib_port); gpu, UUID, link (nvlink); gpu, UUID, peer (nvlink_peer); gpu, UUID (pcie)", "NIC rx+tx drops, IB transmit discards."},
  {"gpuwatch_link_retransmits_per_second", kG, "Hostname, link_type, and per link_type: interface (nic); device, port (ib_port); gpu, UUID, link (nvlink); gpu, UUID, peer (nvlink_peer); gpu, UUID (pcie)", "IB/RoCE transport retransmission counters' rate (local ACK timeouts, out-of-sequence, sequence errors, RNR NAK retries)."},
  {"gpuwatch_link_xmit_wait_per_second", kG, "Hostname, link_type, and per link_type: interface (nic); device, port (ib_port); gpu, UUID, link (nvlink); gpu, UUID, peer (nvlink_peer); gpu, UUID (pcie)", "IB port_xmit_wait ticks per second: time packets waited for credit, the fabric's congestion signal."},
  {"gpuwatch_link_ecn_marked_per_second", kG, "Hostname, link_type, and per link_type: interface (nic); device, port (ib_port); gpu, UUID, link (nvlink); gpu, UUID, peer (nvlink_peer); gpu, UUID (pcie)", "RoCE packets received ECN-marked per second: congestion on the path."},
  // Jobs (R5): the job protocol's window statistics per rank, per job, and the raw steps.
  {"gpuwatch_job_info", kI, "Hostname, job, template, user, project, source", "A running job; value 1. source = sdk (job protocol) or process (GPU process attribution only)."},
  {"gpuwatch_job_hung", kG, "Hostname, job", "1 while the job has live processes and no step for --job-hang-factor x its median step time."},
  {"gpuwatch_job_gpu_seconds_total", kC, "Hostname, job", "GPU time: seconds its processes held each GPU, summed over GPUs (process tier)."},
  {"gpuwatch_job_rank_up", kG, "Hostname, job, rank", "1 while the rank's process runs, 0 once it ended or died."},
  {"gpuwatch_job_steps_total", kC, "Hostname, job, rank", "Steps the rank reported."},
  {"gpuwatch_job_iterations_per_second", kG, "Hostname, job, rank", "Steps per second over the last job-tier window (--job-interval, 15 s)."},
  {"gpuwatch_job_samples_per_second", kG, "Hostname, job, rank", "Samples per second over the last window."},
  {"gpuwatch_job_step_seconds", kG, "Hostname, job, rank, quantile", "Step time quantiles (0.5, 0.95, 0.99) over the last window."},
  {"gpuwatch_job_data_wait_ratio", kG, "Hostname, job, rank", "Share of step time spent waiting for input data over the last window."},
  {"gpuwatch_job_comm_ratio", kG, "Hostname, job, rank", "Share of step time in exposed (not overlapped) communication over the last window."},
  {"gpuwatch_job_checkpoint_ratio", kG, "Hostname, job, rank", "Share of step time blocked on checkpoint writes over the last window."},
  {"gpuwatch_job_loss", kG, "Hostname, job, rank", "Last loss the rank reported in the window."},
  {"gpuwatch_job_grad_norm", kG, "Hostname, job, rank", "Last gradient norm the rank reported in the window."},
  {"gpuwatch_job_step_duration_seconds", kG, "Hostname, job, rank", "Store only: each raw step's duration at its end time (at most --job-raw-steps-hz per rank)."},
  {"gpuwatch_job_step_number", kG, "Hostname, job, rank", "Store only: each raw step's number."},
  {"gpuwatch_job_step_samples", kG, "Hostname, job, rank", "Store only: each raw step's samples."},
  {"gpuwatch_job_step_data_wait_seconds", kG, "Hostname, job, rank", "Store only: each raw step's data wait."},
  {"gpuwatch_job_step_comm_seconds", kG, "Hostname, job, rank", "Store only: each raw step's exposed communication time."},
  {"gpuwatch_job_step_checkpoint_seconds", kG, "Hostname, job, rank", "Store only: each raw step's checkpoint blocking time."},
  {"gpuwatch_job_step_loss", kG, "Hostname, job, rank", "Store only: each raw step's loss."},
  {"gpuwatch_job_step_grad_norm", kG, "Hostname, job, rank", "Store only: each raw step's gradient norm."},
  {"gpuwatch_job_messages_total", kC, "Hostname", "Job protocol messages accepted."},
  {"gpuwatch_job_messages_rejected_total", kC, "Hostname, reason", "Job protocol messages refused, by reason (docs/job-protocol.md)."},
  // The agent itself (R6: its own cost is measured).
  {"gpuwatch_agent_info", kI, "Hostname, version, nvml_version, driver_version, cuda_version", "Build and environment of this agent; value 1."},
  {"gpuwatch_agent_tick_seconds", kG, "Hostname, tier", "Wall time of the last collection tick of each tier."},
  {"gpuwatch_alerts_firing", kG, "Hostname, severity, state", "Alerts firing now (docs/format/alerts.md), by severity, notified or suppressed (silenced, in maintenance or inhibited)."},
  {"gpuwatch_alert_notifications_total", kC, "Hostname, receiver, result", "Alert posts to the webhook or Alertmanager: sent, failed (retried) or dropped (webhook queue full)."},
  // Limits (docs/limits.md): what the agent refused to keep itself and its data safe.
  {"gpuwatch_http_requests_total", kC, "Hostname", "HTTP requests read in full and routed."},
  {"gpuwatch_http_connections", kG, "Hostname", "HTTP connections open now."},
  {"gpuwatch_http_refused_total", kC, "Hostname, reason", "HTTP connections or requests refused by a limit: bad_request, head_too_large, body_too_large, head_timeout, body_timeout, write_timeout, too_many_connections, too_many_per_source, queue_full, body_budget, unauthorized, tls_handshake."},
  {"gpuwatch_http_tls_certificate_not_after_seconds", kG, "Hostname", "When the certificate served over HTTPS expires (Unix seconds; --tls-cert-file, reloaded when the file changes). Absent without TLS."},
  {"gpuwatch_http_tls_reloads_total", kC, "Hostname, result", "Changed TLS certificate or key files loaded (loaded) or refused and the previous pair kept (refused: the pair does not load or match; the log says why)."},
  {"gpuwatch_queries_refused_total", kC, "Hostname, reason", "PromQL queries stopped or refused: concurrency (over --query-max-concurrency), timeout (--query-timeout), cancelled (the client left), limit (samples, series or work)."},
  {"gpuwatch_remote_write_series", kG, "Hostname", "Series created by remote-write senders since the agent started (bounded by --max-series)."},
  {"gpuwatch_remote_write_refused_samples_total", kC, "Hostname, reason", "Remote-write samples refused: series_limit (a new series over --max-series or --max-series-per-sender), out_of_bounds (timestamp before 1970 or after 2262)."},
  {"gpuwatch_limit_hits_total", kC, "Hostname, limit", "Times a limit without a metric of its own was hit, by its name in docs/limits.md: jobs.max_log_files, jobs.log_roots (a declared log file refused), snapshots.max (a snapshot evicted), jobs.tcp_max_connections (a job TCP connection refused), jobs.tcp_idle_timeout (one closed idle or replaced), events.retention (an event segment dropped)."},
  {"gpuwatch_store_blocks", kG, "Hostname", "Blocks of the time-series store on disk."},
  {"gpuwatch_store_block_bytes", kG, "Hostname", "Bytes of the store's blocks."},
  {"gpuwatch_store_wal_bytes", kG, "Hostname", "Bytes of the store's write-ahead log (what a restart replays)."},
  {"gpuwatch_store_head_series", kG, "Hostname", "Series in the store's head (memory)."},
  {"gpuwatch_store_errors_total", kC, "Hostname, op", "Store operations that failed: write (the WAL refused an append: disk full, file-size limit, I/O error) and flush (a block could not be written; the data stays in the WAL)."},
  {"gpuwatch_pushes_shed_total", kC, "Hostname", "Pushes (remote-write, records) answered 429 with Retry-After because too many were being handled at once."},
  // The push to a hub (gpuwatch up --hub).
  {"gpuwatch_hub_push_requests_total", kC, "Hostname, result", "Requests this agent sent to its hub: sent (2xx) or failed (no connection, 4xx, 5xx)."},
  {"gpuwatch_hub_push_entries_total", kC, "Hostname, result", "Spool entries the hub took (sent) or refused for good with a 400, 409, 413 or 415 (dropped)."},
  {"gpuwatch_hub_push_backlog_entries", kG, "Hostname", "Spool entries (samples and records) the hub has not yet taken: after an outage, what is left to resend."},
  {"gpuwatch_hub_push_last_success_timestamp_seconds", kG, "Hostname", "When the hub last took a request from this agent."},
  {"gpuwatch_hub_push_auth_refused", kG, "Hostname", "1 while the hub answers 401 or 403 to this agent's token (an alert fires too; nothing is dropped)."},
  // A hub's forward to a cluster (gpuwatch hub --remote-write).
  {"gpuwatch_remote_write_forward_requests_total", kC, "Hostname, result", "Requests the hub sent to its --remote-write destination: sent (2xx) or failed (no connection, 4xx, 5xx)."},
  {"gpuwatch_remote_write_forward_entries_total", kC, "Hostname, result", "Forward spool entries the destination took (sent) or refused for good with a 400, 409, 413 or 415 (dropped)."},
  {"gpuwatch_remote_write_forward_backlog_entries", kG, "Hostname", "Forward spool entries the destination has not yet taken."},
  {"gpuwatch_remote_write_forward_spool_bytes", kG, "Hostname", "Bytes of the forward spool on disk; a relaying hub (--read-from too) answers 429 to remote-write past half of --spool-max."},
  {"gpuwatch_remote_write_forward_last_success_timestamp_seconds", kG, "Hostname", "When the destination last took a request from the hub."},
  {"gpuwatch_events_bytes", kG, "Hostname, partition", "Bytes of the event log on disk: events, and bulk (job log lines and annotations, with their own budget)."},
  {"gpuwatch_remote_write_refused_requests_total", kC, "Hostname, reason", "Remote-write requests refused whole: too_large (inflated size, series, samples or labels over the per-request limits, 413), forward_backlog (a relaying hub whose forward spool is over half of --spool-max, 429)."},
  {"gpuwatch_agent_tier_cpu_seconds_total", kC, "Hostname, tier", "CPU time each tier of the agent's collection thread used since start (topology, gpu, host, processes, jobs, drain, diagnosis): the agent's own cost."},
}};
// clang-format on

}  // namespace

std::string_view MetricTypeName(MetricType t) {
  switch (t) {
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kCounter:
      return "counter";
    case MetricType::kInfo:
      return "gauge";  // info series are gauges of value 1
  }
  return "untyped";
}

std::string_view ExpositionTypeName(std::string_view name, MetricType t) {
  if (t == MetricType::kCounter && !name.ends_with("_total")) return "untyped";
  return MetricTypeName(t);
}

std::span<const GpuMetricDesc> GpuMetricCatalog() { return kGpu; }
const GpuMetricDesc& Describe(GpuMetric m) { return kGpu[Idx(m)]; }
std::span<const OtherMetricDesc> OtherMetricCatalog() { return kOther; }

const OtherMetricDesc& DescribeOther(std::string_view name) {
  for (const auto& d : kOther)
    if (d.name == name) return d;
  // A name missing from the catalog is a programming error caught by the exposition test.
  std::abort();
}

std::string RenderMetricsMarkdown() {
  std::string out =
      "# gpuwatch metrics\n\n"
      "Generated from the metric catalog (`src/model/metric_catalog.cc`) by "
      "`gpuwatch docs metrics`; a test keeps this file equal to that output.\n\n"
      "Every per-GPU series carries the labels of NVIDIA dcgm-exporter: `gpu` (NVML index), "
      "`UUID`, `pci_bus_id`, `device` (nvidiaN), `model_name`, `Hostname`, "
      "`DCGM_FI_DRIVER_VERSION`. dcgm-exporter spells the model label `modelName`, which "
      "Prometheus's naming rules reject; `--model-label modelName` restores that spelling for "
      "dashboards that need it (NVIDIA's own dashboard keys on `gpu` and `instance`). Names follow "
      "dcgm-exporter where it has a counterpart, so "
      "its Grafana dashboards work unchanged; every field is exported by default. A field the "
      "device does not support is absent (never 0) and listed in `/api/v1/capabilities`. "
      "dcgm-exporter's counter names that do not end in `_total` are exposed as `untyped`, "
      "as Prometheus's naming rules require; `rate()` and `increase()` work on them as on any "
      "counter.\n\n"
      "**Stored series** (the query API, `/api/v1/query*`) also carry the two labels a "
      "Prometheus scrape of the agent would add: `instance` = `<Hostname>:<port>` of the "
      "agent's `--listen` and `job=\"gpuwatch\"`, so that dashboards written against a "
      "scraping Prometheus (dcgm-exporter's filter on `instance`) work against the agent "
      "unchanged. A series with a `job` label of its own keeps it: the `gpuwatch_job_*` series "
      "name the training job there, as a scrape with `honor_labels: true` keeps it (scrape the "
      "agent with `honor_labels: true` for the same labels in Prometheus). `/metrics` carries "
      "neither: the scraper adds them. Series written to `/api/v1/write` are stored as sent.\n\n"
      "## Per-GPU scalars\n\n"
      "| name | type | unit | trace field | NVML source | meaning |\n"
      "|---|---|---|---|---|---|\n";
  for (const auto& d : kGpu) {
    const auto exposed = ExpositionTypeName(d.name, d.type);
    const std::string type = exposed == MetricTypeName(d.type)
                                 ? std::string(exposed)
                                 : fmt::format("{} (exposed {})", MetricTypeName(d.type), exposed);
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", d.name, type, d.unit,
                       d.trace_field.empty() ? "" : fmt::format("`{}`", d.trace_field),
                       d.nvml_source, d.help);
  }
  out +=
      "\n## Other series\n\n"
      "| name | type | labels beyond the GPU labels | meaning |\n"
      "|---|---|---|---|\n";
  for (const auto& d : kOther) {
    out += fmt::format("| `{}` | {} | {} | {} |\n", d.name,
                       d.type == MetricType::kInfo ? "info (gauge 1)" : MetricTypeName(d.type),
                       d.labels, d.help);
  }
  return out;
}

}  // namespace gpuwatch::model
