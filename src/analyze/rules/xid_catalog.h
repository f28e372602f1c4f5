// What an XID says, for the diagnosis: NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors,
// its "Resolution Bucket (Immediate Action)" column as NVSentinel's xiderrorsmapping.csv copies
// it; docs/research/xid.md) folded into findings.md's causes.
// Thread-safety: pure functions over static data.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "model/cause.h"

namespace gpuwatch::analyze {

struct XidMeaning {
  // The cause it is reported as; nullopt for an XID that is another error's consequence.
  std::optional<model::Cause> cause;
  model::Severity severity = model::Severity::kWarning;
  std::string_view family;  // "application fault", "GPU memory (ECC)", …
  std::string_view action;
};

// findings.md: 79 is gpu_lost; the ECC family (48, 63, 64, 94, 95, and 140, an ECC error that
// escaped) is ecc_dbe; 74 and the NVLink5 family (144–150) are nvlink_errors; the rest is xid.
// Consequences, never causes: 43 (the GPU stopped a faulting channel), 45 (channels torn down as
// a process died, or "caused by previous Xid N"), 154 (the recovery action a preceding error
// needs). Severity: critical for gpu_lost, ecc_dbe and a fatal NVLink error; an xid is a
// warning, and its action says when the catalog's immediate action is a GPU reset.
// `text` is what the driver printed after the code (it says Fatal/Nonfatal for NVLink5 XIDs).
XidMeaning MeaningOfXid(int64_t code, std::string_view text = {});

}  // namespace gpuwatch::analyze
