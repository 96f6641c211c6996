#include "engine/batch_builder.h"

namespace kvscope {

void build_batch(const SchedulerOutput& out, const KvSlotAllocator& kv,
                 const std::unordered_map<SeqId, std::unique_ptr<RequestRecord>>& requests, StepBatch& b) {
  const int32_t n_groups = kv.num_groups();
  b.view.groups_after_first.resize(static_cast<size_t>(n_groups - 1));
  b.tables.assign(static_cast<size_t>(n_groups) * out.chunks.size(), {});
  b.chunk_rows.assign(out.chunks.size(), {0, 0});
  BatchView& v = b.view;
  for (size_t c = 0; c < out.chunks.size(); ++c) {
    const ScheduledChunk& ch = out.chunks[c];
    const Sequence& s = *ch.seq;
    const RequestRecord& rt = *requests.at(s.id);
    const int32_t si = static_cast<int32_t>(c);
    for (int32_t g = 0; g < n_groups; ++g) {
      std::vector<BlockId>& t = b.tables[static_cast<size_t>(g) * out.chunks.size() + c];
      t = kv.group_block_table(s.id, g);
      (g == 0 ? v.block_tables : v.groups_after_first[static_cast<size_t>(g - 1)].block_tables).emplace_back(t);
    }
    const int32_t state_slot = kv.state_slot(s.id);
    v.state_slots.push_back(state_slot);
    b.chunk_rows[c].first = static_cast<int32_t>(v.logits_rows.size());
    for (int32_t i = 0; i < ch.n_tokens; ++i) {
      const int32_t pos = ch.first_pos + i;
      v.tokens.push_back(s.tokens[static_cast<size_t>(pos)]);
      v.positions.push_back(pos);
      v.slot_mapping.push_back(kv.slot(s.id, pos));
      for (int32_t g = 1; g < n_groups; ++g)
        v.groups_after_first[static_cast<size_t>(g - 1)].slot_mapping.push_back(kv.group_slot(g, s.id, pos));
      v.seq_index.push_back(si);
      if (state_slot >= 0) v.state_save_to.push_back(kv.state_save_slot(s.id, pos));  // every sequence has one
      const bool last = i == ch.n_tokens - 1;
      // Perplexity needs the prediction after every prompt position but the last (whose
      // logits are the sampling row anyway).
      if ((last && ch.wants_logits) || (rt.record_prompt_logits && pos < s.prompt_len - 1))
        v.logits_rows.push_back(v.n_tokens() - 1);
    }
    b.chunk_rows[c].second = static_cast<int32_t>(v.logits_rows.size()) - b.chunk_rows[c].first;
    // A decode step computes the one token sampled last step; everything else is (re)prefill.
    const bool decode = ch.n_tokens == 1 && ch.first_pos == s.total_len() - 1 && ch.first_pos >= s.prompt_len;
    if (!decode) b.prefilled_tokens += static_cast<uint64_t>(ch.n_tokens);
  }
}

}  // namespace kvscope
