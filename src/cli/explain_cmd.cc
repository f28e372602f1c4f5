#include "cli/explain_cmd.h"

#include <iostream>
#include <memory>

#include "explain/explain.h"

namespace gpuwatch::cli {

int RunExplain(const std::vector<std::string>& files, bool json, const std::string& node,
               std::ostream& out, std::ostream& err) {
  std::vector<explain::InputFile> inputs;
  for (const std::string& path : files) {
    auto text = explain::ReadInput(path);
    if (!text.ok()) {
      err << "gpuwatch: explain: " << text.status().message() << "\n";
      return 2;
    }
    inputs.push_back({path, std::move(*text)});
  }
  const explain::Explanation e = explain::Explain(inputs, node);
  if (json) {
    out << e.document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    out << explain::RenderExplanation(e);
  }
  for (const analyze::Finding& f : e.findings) {
    if (!f.is_info()) return 1;
  }
  return 0;
}

void RegisterExplainCommand(CLI::App* app, Commands* out) {
  struct Flags {
    std::vector<std::string> files;
    bool json = false;
    std::string node;
  };
  auto f = std::make_shared<Flags>();
  auto* explain = app->add_subcommand(
      "explain",
      "The post-mortem from the text you have: kernel logs, NCCL logs, launcher and training "
      "logs, nvidia-smi output, topo -m, nccl-tests output (plain or .gz, any mix); what each "
      "file holds and the findings they support together (docs/format/explain.md). Exit 0 with "
      "no warning or critical finding, 1 with one, 2 when a file cannot be read");
  explain->add_option("files", f->files, "The files")->required();
  explain->add_flag("--json", f->json, "Print JSON");
  explain->add_option("--node", f->node,
                      "The node, when the text names no host (default: unknown)");
  out->push_back(
      {explain, [f] { return RunExplain(f->files, f->json, f->node, std::cout, std::cerr); }});
}

}  // namespace gpuwatch::cli
