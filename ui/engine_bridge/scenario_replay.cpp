#include "engine_bridge/scenario_replay.h"

#include <algorithm>

namespace kvscope::ui {

void ScenarioReplay::start(Engine& engine, const Scenario& w, Submitted submitted, Progress progress) {
  progress_ = std::move(progress);
  WorkloadRunnerOptions opt;
  opt.max_wait_s = 0.01;  // waits for an arrival time in short slices: commands still come through
  opt.hooks.on_submitted = [this, submitted = std::move(submitted)](const WorkloadRequest&, const Request& q,
                                                                    const std::vector<SeqId>& ids) {
    for (SeqId id : ids) seqs_.insert(id);
    submitted(q, ids);
  };
  // Never submitted (a broken-off conversation, a bad prompt, cancel all): done all the same.
  opt.hooks.on_skipped = [this](const WorkloadRequest& r) { progressed(std::max(1, r.n)); };
  runner_ = std::make_unique<WorkloadRunner>(engine, w, std::move(opt));
  seqs_.clear();
  total_ = scenario_request_count(w);
  done_ = 0;
}

void ScenarioReplay::reset() {
  runner_.reset();
  seqs_.clear();
  total_ = done_ = 0;
}

bool ScenarioReplay::step() {
  if (runner_ && !runner_->step()) runner_.reset();
  return runner_ != nullptr;
}

void ScenarioReplay::dropPending() {
  if (runner_) runner_->drop_pending();
}

void ScenarioReplay::sequenceFinished(SeqId id) {
  if (seqs_.erase(id)) progressed(1);
}

void ScenarioReplay::progressed(int newlyDone) {
  done_ += newlyDone;
  if (progress_) progress_(done_, total_);
}

}  // namespace kvscope::ui
