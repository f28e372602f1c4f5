// What an XID says, for the diagnosis: NVIDIA's XID catalog
// (docs.nvidia.com/deploy/xid-errors; docs/research/xid.md) folded into findings.md's causes.
// Thread-safety: pure functions over static data.
#pragma once

#include <cstdint>
#include <optional>

#include "model/cause.h"

namespace gpuwatch::analyze {

// The cause an XID is reported as: 79 gpu_lost; the ECC family (48, 63, 64, 94, 95) ecc_dbe; 74
// nvlink_errors; nullopt for the XIDs that are another error's consequence, not a cause (43: the
// GPU stopped a faulting process's channel; 45: channels cleaned up as a process died); xid for
// the rest.
std::optional<model::Cause> CauseOfXid(int64_t code);

}  // namespace gpuwatch::analyze
