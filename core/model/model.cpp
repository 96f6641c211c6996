#include "model/model.h"

#include <sstream>

namespace kvscope {

std::shared_ptr<Model> Model::load(const std::string& path) {
  auto m = std::make_shared<Model>();
  m->file = GgufFile::open(path);
  try {
    m->config = ModelConfig::from_gguf(*m->file);
    m->weights = ModelWeights::from_gguf(*m->file, m->config);
  } catch (const ModelError& e) { throw ModelError(std::string(e.what()) + " (in " + path + ")"); }
  m->tokenizer = Tokenizer::from_gguf(*m->file);
  if (m->tokenizer->n_vocab() != m->config.n_vocab)
    throw ModelError("vocabulary size mismatch: tokenizer has " + std::to_string(m->tokenizer->n_vocab()) +
                     " tokens, the model " + std::to_string(m->config.n_vocab));
  // Reliability fix (found while writing the fuzz harness): an SPM vocabulary with neither a
  // <0xXX> token for some byte nor an unknown token loads, then throws from encode() whenever a
  // prompt holds that byte. Every byte once, at load, turns that into one clear refusal here
  // instead of a failure per prompt.
  try {
    std::string all_bytes(256, '\0');
    for (int b = 0; b < 256; ++b) all_bytes[static_cast<size_t>(b)] = static_cast<char>(b);
    (void)m->tokenizer->encode(all_bytes, false, false);
  } catch (const std::runtime_error& e) {
    throw ModelError(std::string("the tokenizer cannot encode every prompt: ") + e.what());
  }
  m->synthetic = m->file->get_bool("kvscope.synthetic").value_or(false);
  return m;
}

std::string Model::describe() const {
  std::ostringstream os;
  const ModelConfig& c = config;
  os << c.arch << (c.name.empty() ? "" : " '" + c.name + "'") << ", " << weights.n_params / 1000 << "K params, "
     << c.n_layer << " layers, n_embd " << c.n_embd << ", heads " << c.n_head << "/" << c.n_head_kv
     << " (q/kv), head_dim " << c.head_dim << ", vocab " << c.n_vocab;
  if (c.moe.n_expert > 0)
    os << ", MoE " << c.moe.n_expert_used << " of " << c.moe.n_expert << " experts per token ("
       << weights.n_active_params / 1000 << "K params active; KV per token is attention's, not the experts')";
  if (c.latent_kv())
    os << ", latent attention: one cached row of " << c.mla.kv_lora_rank << " latent + " << c.rope_dim
       << " RoPE values per token and layer, read by all " << c.n_head << " heads (decompressed heads "
       << c.mla.qk_nope + c.rope_dim << "/" << c.mla.v_dim << " wide, never cached)";
  if (synthetic) os << " [synthetic: RANDOM WEIGHTS, output is gibberish]";
  return os.str();
}

}  // namespace kvscope
