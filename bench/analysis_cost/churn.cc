// Job churn through the diagnosis engine (issue 16): an 8-GPU node runs 1,000 jobs one after
// another, each eight ranks for about five minutes (every record a live node writes: a GPU
// sample per GPU per second, a step per rank, process rounds every 10 s, host samples every
// 5 s, a few log lines), every twentieth with a thermal throttle on one GPU; findings are asked
// for every 5 s of trace time, as the live agent does, with the live agent's settings (findings
// dropped an hour after they were last seen, jobs forgotten ten minutes after they end).
//
// Prints, per 100 jobs: records so far, CPU per record over those jobs, the process's resident
// memory, and the engine's per-job state entries. Flat columns are the claim.
//
//   build/release/bench/churn [JOBS]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "analyze/diagnoser.h"

namespace {

using gpuwatch::analyze::Diagnoser;
using gpuwatch::analyze::DiagnoserOptions;
namespace trace = gpuwatch::trace;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double RssMib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
}

}  // namespace

int main(int argc, char** argv) {
  const int jobs = argc > 1 ? std::stoi(argv[1]) : 1000;
  constexpr int kGpus = 8;
  constexpr int kSteps = 280;  // about five minutes at ~1.05 s a step
  DiagnoserOptions o;
  o.context.drop_findings_after_s = 3600;  // the live agent's (server/live_diagnosis.h)
  Diagnoser d(o);
  const std::string node = "churn-node";
  uint64_t records = 0;
  double t = 1764460800;
  double next_finish = t;
  size_t findings = 0;  // the most findings one Finish returned since the last report
  auto observe = [&](trace::TraceRecord& r) {
    r.node = node;
    r.t = t;
    r.t_ms = static_cast<int64_t>(t * 1000);
    d.Observe(r);
    ++records;
    if (t >= next_finish) {
      findings = std::max(findings, d.Finish(t).size());
      next_finish = t + 5;
    }
  };
  {
    trace::TraceRecord r;
    trace::TraceNode n;
    std::vector<trace::TraceNodeGpu> gpus;
    for (uint32_t g = 0; g < kGpus; ++g) {
      trace::TraceNodeGpu x;
      x.index = g;
      x.memory_total_mib = 81559;
      x.max_sm_clock_mhz = 1980;
      x.pcie_max_gen = 5;
      x.pcie_max_width = 16;
      gpus.push_back(x);
    }
    n.gpus = gpus;
    r.body = n;
    observe(r);
  }
  std::printf("%6s %10s %12s %9s %12s %12s\n", "jobs", "records", "us/record", "RSS MiB",
              "job entries", "findings max");
  double cpu0 = CpuSeconds();
  uint64_t records0 = records;
  for (int j = 0; j < jobs; ++j) {
    const std::string job = "churn-" + std::to_string(j);
    const bool hot = j % 20 == 7;  // a thermal throttle on GPU 3 in every 20th job
    trace::TraceRecord r;
    trace::TraceJob start;
    start.job = job;
    start.state = "start";
    start.template_name = "llm-8b";
    start.gpus = std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7};
    r.body = start;
    observe(r);
    for (int s = 0; s < kSteps; ++s) {
      t += 1.05;
      for (uint32_t g = 0; g < kGpus; ++g) {
        trace::TraceGpu x;
        x.gpu = g;
        x.util_pct = 96;
        x.power_w = 600;
        x.temp_c = hot && g == 3 && s > 100 ? 88 : 70;
        x.sm_clock_mhz = hot && g == 3 && s > 100 ? 1400 : 1980;
        x.throttle = hot && g == 3 && s > 100 ? std::vector<std::string>{"sw_thermal"}
                                              : std::vector<std::string>{};
        x.mem_used_mib = 60000;
        x.pcie_gen = 5;
        x.pcie_width = 16;
        r.body = x;
        observe(r);
        trace::TraceStep st;
        st.job = job;
        st.rank = g;
        st.gpu = g;
        st.step = static_cast<uint64_t>(s);
        st.duration_s = 1.05;
        st.data_wait_s = 0.02;
        st.comm_s = 0.12;
        r.body = st;
        observe(r);
        if (s % 10 == 0) {
          trace::TraceProc p;
          p.pid = static_cast<uint32_t>(10000 + j * kGpus + g);
          p.gpu = g;
          p.job = job;
          p.cpu_numa_nodes = std::vector<uint32_t>{g < 4 ? 0u : 1u};
          r.body = p;
          observe(r);
        }
      }
      if (s % 5 == 0) {
        trace::TraceHost h;
        h.cpu_pct = 35;
        r.body = h;
        observe(r);
      }
      if (s % 50 == 0) {
        trace::TraceLog l;
        l.job = job;
        l.rank = 0;
        l.source = "job";
        l.line = "step " + std::to_string(s) + " | loss 1.23 | 31.7 samples/s";
        r.body = l;
        observe(r);
      }
    }
    t += 1;
    trace::TraceJob end;
    end.job = job;
    end.state = "end";
    end.exit_code = 0;
    r.body = end;
    observe(r);
    t += 20;
    if ((j + 1) % 100 == 0) {
      const double cpu = CpuSeconds();
      std::printf("%6d %10llu %12.3f %9.1f %12zu %12zu\n", j + 1,
                  static_cast<unsigned long long>(records),
                  (cpu - cpu0) * 1e6 / static_cast<double>(records - records0), RssMib(),
                  d.JobEntries(), findings);
      std::fflush(stdout);
      findings = 0;
      cpu0 = cpu;
      records0 = records;
    }
  }
  std::printf("findings at the end: %zu (the thermal throttles seen in the last hour)\n",
              d.Finish(t).size());
  return 0;
}
