// topology_change: the node's GPU/NIC topology differs from what it was (findings.md: "differs
// from the archived snapshot"). The live agent compares each snapshot with its archive and
// writes a topology_change event (server/agent, topo/archive).
#include <array>

#include "analyze/rules/rules.h"

namespace gpuwatch::analyze {
namespace {

constexpr std::array kCauses = {Cause::kTopologyChange};

class TopologyRule : public Rule {
 public:
  std::string_view name() const override { return "topology"; }
  std::span<const Cause> causes() const override { return kCauses; }

  void Observe(const trace::TraceRecord& r, Context& ctx) override {
    const auto* e = r.as<trace::TraceEvent>();
    if (!e || e->kind.value_or("") != "topology_change") return;
    const std::string message = e->message.value_or("");
    Finding f = MakeFinding(Cause::kTopologyChange, Severity::kWarning, r.node);
    f.summary = "The node's topology changed: " + message;
    f.evidence = {"topology_change: " + message};
    f.action = "Compare with the archived topology (gpuwatch topo diff); reseat what was lost";
    ctx.Report(std::move(f), r.t);
  }
};

}  // namespace

std::unique_ptr<Rule> MakeTopologyRule() { return std::make_unique<TopologyRule>(); }

}  // namespace gpuwatch::analyze
