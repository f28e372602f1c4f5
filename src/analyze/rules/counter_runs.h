// Runs of counter increments, shared by the rules that judge rising counters (card: PCIe
// replays, ECC, NVLink; host_nic: NIC errors).
#pragma once

#include <deque>

namespace gpuwatch::analyze {

// The start of the newest run of increments with no gap over `max_gap` between them: a counter
// that rose once long before (healthy runs have an isolated increment) does not date a fault.
// REQUIRES: !times.empty().
inline double RunStart(const std::deque<double>& times, double max_gap) {
  double start = times.back();
  for (size_t i = times.size() - 1; i > 0 && times[i] - times[i - 1] <= max_gap; --i) {
    start = times[i - 1];
  }
  return start;
}

}  // namespace gpuwatch::analyze
