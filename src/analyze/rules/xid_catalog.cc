#include "analyze/rules/xid_catalog.h"

namespace gpuwatch::analyze {

std::optional<model::Cause> CauseOfXid(int64_t code) {
  switch (code) {
    case 79:
      return model::Cause::kGpuLost;
    case 48:
    case 63:
    case 64:
    case 94:
    case 95:
      return model::Cause::kEccDbe;
    case 74:
      return model::Cause::kNvlinkErrors;
    case 43:
    case 45:
      return std::nullopt;
  }
  return model::Cause::kXid;
}

}  // namespace gpuwatch::analyze
