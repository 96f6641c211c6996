#include "cli/plan_model_gguf.h"

#include "gguf/gguf_file.h"
#include "model/model_config.h"

namespace kvscope::cli {

// A GGUF file's shape for the planner: parameter count and stored bytes from its tensors.
PlanModel plan_model_from_gguf(const std::string& path) {
  auto file = GgufFile::open(path);
  const ModelConfig c = ModelConfig::from_gguf(*file);
  PlanModel m;
  m.name = c.name.empty() ? path : c.name;
  m.n_layer = c.n_layer;
  m.n_head = c.n_head;
  m.n_head_kv = c.n_head_kv;
  m.head_dim = c.head_dim;
  m.n_ctx_train = c.n_ctx_train;
  m.sliding_window = c.sliding_window;
  for (int32_t il = 0; il < c.n_layer; ++il) m.n_swa_layers += c.layer_is_swa(il) ? 1 : 0;
  if (m.sliding_window > 0 && !c.traits.interleaved_swa) m.n_swa_layers = c.n_layer;
  for (int32_t il = 0; il < c.n_layer && !c.shapes.empty(); ++il) {  // gemma4: each kind's shape, borrowed KV
    if (c.layer_is_swa(il)) {
      m.swa_n_head_kv = c.layer_n_head_kv(il);
      m.swa_head_dim = c.layer_head_dim(il);
    }
    if (!c.layer_owns_kv(il)) ++(c.layer_is_swa(il) ? m.n_borrow_swa : m.n_borrow_full);
  }
  for (int32_t il = 0; il < c.n_layer; ++il) m.n_recurrent_layers += c.layer_is_recurrent(il) ? 1 : 0;
  if (m.n_recurrent_layers > 0)  // the state as kvscope keeps it: f32
    m.state_bytes_per_layer = c.state_floats_per_seq() / m.n_recurrent_layers * static_cast<int64_t>(sizeof(float));
  for (const GgufTensorInfo& t : file->tensors()) {
    m.n_params += static_cast<double>(t.n_elements());
    m.file_weight_bytes += static_cast<int64_t>(t.nbytes);
  }
  m.note = path;
  if (c.latent_kv()) {
    m.kv_lora_rank = c.mla.kv_lora_rank;
    m.mla_k_dim = c.mla.qk_nope + c.rope_dim;
    m.mla_v_dim = c.mla.v_dim;
  }
  m.n_expert = c.moe.n_expert;
  m.n_expert_used = c.moe.n_expert_used;
  if (c.moe.n_expert > 0) {
    int64_t idle = 0;  // what one token does not read: the experts it is not routed to
    for (int32_t il = 0; il < c.n_layer; ++il)
      if (c.layer_is_moe(il)) idle += int64_t{3} * c.n_embd * c.moe.n_ff_exp * (c.moe.n_expert - c.moe.n_expert_used);
    m.n_active_params = m.n_params - static_cast<double>(idle);
  }
  return m;
}

}  // namespace kvscope::cli
