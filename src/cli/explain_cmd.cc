#include "cli/explain_cmd.h"

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

}  // namespace gpuwatch::cli
