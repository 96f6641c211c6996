#pragma once
// Scenario replay on the engine's thread: the core's WorkloadRunner (core/run), stepped from the
// worker's step loop, so the GUI and kvscope-cli share one replay core. This follows the
// runner's sequences for the progress count (parallel samples count one each). A plain class,
// used on the worker's thread only.
#include <functional>
#include <memory>
#include <unordered_set>
#include <vector>

#include "engine/engine.h"
#include "run/workload_runner.h"
#include "engine_bridge/workload_source.h"

namespace kvscope::ui {

class ScenarioReplay {
 public:
  using Submitted = std::function<void(const Request& q, const std::vector<SeqId>& ids)>;
  using Progress = std::function<void(int done, int total)>;

  // Starts `w` on `engine`: `submitted` for each request the runner submits, `progress` for
  // every request done (finished or never submitted). Replaces a replay in progress.
  void start(Engine& engine, const Scenario& w, Submitted submitted, Progress progress);
  void reset();  // the engine it drives was rebuilt
  bool active() const { return runner_ != nullptr; }
  int total() const { return total_; }
  // One runner step (submits what has arrived and steps the engine, or waits one short slice
  // for an arrival); false, and the runner dropped, once it has nothing left to submit.
  bool step();
  void dropPending();               // requests not yet submitted count as done
  void sequenceFinished(SeqId id);  // counts it when it was one of the scenario's

 private:
  void progressed(int newlyDone);
  std::unique_ptr<WorkloadRunner> runner_;
  std::unordered_set<SeqId> seqs_;  // the runner's sequences still in the engine
  int total_ = 0, done_ = 0;
  Progress progress_;
};

}  // namespace kvscope::ui
