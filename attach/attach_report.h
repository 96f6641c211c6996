#pragma once
// What `kvscope-cli attach --json-out` writes: per instance its endpoint, counters, cached
// blocks and tree shape, its metrics, and the merged tree over the fleet.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attach/fleet_sharing.h"
#include "attach/instance_timeline.h"
#include "attach/metrics_scraper.h"
#include "attach/prefix_forest.h"
#include "attach/attached_streams.h"

namespace kvscope::attach {

// Token ids -> text (from --tokenizer); empty function: no "text" fields.
using TokenText = std::function<std::string(const std::vector<int64_t>&)>;

nlohmann::json hash_json(const BlockHash& h);  // a JSON integer, or a hex string for digests
nlohmann::json instance_json(const InstanceSpec& spec, const InstanceStream& s, const TokenText& text);
// instances: how many views were merged (for the overlap per instance and per holder count).
nlohmann::json merged_json(const MergedTree& m, size_t instances);
// The summary of one instance's memory over time and its thinned series (columns).
nlohmann::json timeline_json(const InstanceTimeline& t);
// metrics[i] belongs to --endpoint i (all its data-parallel ranks); may be shorter.
// timelines[i] belongs to instance i; without them there is no "timeline" field.
nlohmann::json attach_report(const AttachedStreams& a, const std::vector<ScrapeStats>& metrics, const TokenText& text,
                             double seconds, const std::vector<InstanceTimeline>& timelines = {});

}  // namespace kvscope::attach
