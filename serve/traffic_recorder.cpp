#include "serve/traffic_recorder.h"

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kv/block_hash.h"

namespace kvscope::serve {

TrafficRecorder::TrafficRecorder(const std::string& path, int32_t block_size)
    : out_(path, std::ios::out | std::ios::trunc), block_size_(block_size) {
  if (!out_) throw std::runtime_error("cannot write the traffic recording '" + path + "'");
  if (block_size < 1) throw std::invalid_argument("block size must be >= 1");
}

TrafficRecorder::~TrafficRecorder() {
  for (auto& [key, line] : held_)
    if (!line.empty()) out_ << line << '\n';
  out_.flush();
}

std::vector<int64_t> TrafficRecorder::hash_ids(std::span<const TokenId> prompt, int32_t block_size) {
  std::vector<int64_t> ids;
  BlockHash parent = kRootBlockHash;
  for (size_t b = 0; (b + 1) * static_cast<size_t>(block_size) <= prompt.size(); ++b) {
    parent =
        block_hash(parent, prompt.subspan(b * static_cast<size_t>(block_size), static_cast<size_t>(block_size)), 0);
    ids.push_back(static_cast<int64_t>(parent >> 1));
  }
  return ids;
}

void TrafficRecorder::started(SeqId id, Clock::time_point arrival) {
  const int64_t ms =
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(arrival - start_).count());
  arrival_ms_[id] = ms;
  held_.emplace(std::make_pair(ms, id), std::string());
}

void TrafficRecorder::finished(SeqId id, std::span<const TokenId> prompt, int32_t output_tokens,
                               const std::string& session, bool ran) {
  const auto a = arrival_ms_.find(id);
  if (a == arrival_ms_.end()) return;
  const auto key = std::make_pair(a->second, id);
  arrival_ms_.erase(a);
  if (!ran || prompt.empty()) {
    held_.erase(key);
  } else {
    nlohmann::json j = {{"timestamp_ms", key.first},
                        {"input_length", prompt.size()},
                        {"output_length", output_tokens},
                        {"hash_ids", hash_ids(prompt, block_size_)},
                        {"block_size", block_size_}};
    if (!session.empty()) j["session_id"] = session;
    held_[key] = j.dump();
  }
  write_ready();
}

void TrafficRecorder::write_ready() {
  bool wrote = false;
  while (!held_.empty() && !held_.begin()->second.empty()) {
    out_ << held_.begin()->second << '\n';
    held_.erase(held_.begin());
    ++written_;
    wrote = true;
  }
  if (wrote) out_.flush();
}

}  // namespace kvscope::serve
