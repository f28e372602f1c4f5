// What findings cost and what was ruled out (issue 16: the chain from symptom to cause, task →
// card → link, in words and numbers), added to the engine's findings after its deepest-cause
// pass:
// - A card or link finding on a node where a job is running names the job and the size of the
//   harm: the job's recent median step against its reference (its template's stored baseline,
//   else its own steps after warm-up), the rank the others wait for, and — for a cause that
//   slows one GPU's clock — how much of the job's slowdown that GPU's lost clock explains.
//   Example: "job 8617 is 14 % slower than its baseline; rank 3 on GPU 3 is the slowest; GPU 3
//   is thermally throttled at 87 °C".
// - A task finding lists the deeper causes the cause catalog says could explain it and that the
//   engine looked for on the job's nodes and did not find (ruled_out).
//
// Thread-safety: pure function of the findings and the Context.
#pragma once

#include <vector>

#include "analyze/context.h"
#include "analyze/finding.h"

namespace gpuwatch::analyze {

void DescribeImpact(std::vector<Finding>& findings, const Context& ctx);

}  // namespace gpuwatch::analyze
