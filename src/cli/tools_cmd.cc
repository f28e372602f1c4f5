#include "cli/tools_cmd.h"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/limits.h"
#include "model/metric_catalog.h"
#include "server/tokens.h"

namespace gpuwatch::cli {

void RegisterToolCommands(CLI::App* app, Commands* out) {
  auto* docs = app->add_subcommand("docs", "Print generated documentation");
  docs->require_subcommand(1);
  auto* metrics = docs->add_subcommand("metrics", "docs/metrics.md, from the metric catalog");
  auto* limits =
      docs->add_subcommand("limits", "docs/limits.md's table of limits, from the code's defaults");
  out->push_back({metrics, [] {
                    std::cout << model::RenderMetricsMarkdown();
                    return 0;
                  }});
  out->push_back({limits, [] {
                    std::cout << RenderLimitsTable();
                    return 0;
                  }});

  struct TokenFlags {
    std::string role;
    std::vector<std::string> projects;
  };
  auto t = std::make_shared<TokenFlags>();
  auto* token = app->add_subcommand("token", "Tokens for a --tokens file");
  token->require_subcommand(1);
  auto* token_new = token->add_subcommand(
      "new", "Print a tokens-file line, TOKEN ROLE [PROJECT,...], with a new random token");
  token_new->add_option("role", t->role, "read, write or admin")
      ->required()
      ->check(CLI::IsMember({"read", "write", "admin"}));
  token_new->add_option("projects", t->projects, "Confine the token to these projects (a,b)")
      ->delimiter(',');
  out->push_back({token_new, [t] {
                    // CLI::IsMember above admits only the three roles.
                    const server::Role role =
                        server::ParseRole(t->role).value_or(server::Role::kRead);
                    auto line = server::NewTokenLine(role, t->projects);
                    if (!line.ok()) {
                      std::cerr << "gpuwatch token new: " << line.status().message() << "\n";
                      return 2;
                    }
                    std::cout << *line << "\n";
                    return 0;
                  }});
}

}  // namespace gpuwatch::cli
