#pragma once
// Which layers of a hybrid model keep a fixed per-sequence state instead of KV (lfm2's short
// convolutions, Qwen3.5's Gated DeltaNet), read as llama.cpp's load_arch_hparams reads them.
#include "model/model_config.h"

namespace kvscope {

// Fills c.recurrent, the attention layers' head counts (head_count, head_count_kv are per layer:
// 0 KV heads marks a recurrent layer), head_dim when key_length is absent, and conv_l_cache.
// Throws ModelError naming the key: no attention layer, attention layers of different head
// counts, attention.recurrent_layers disagreeing with head_count_kv, a kernel under 2 taps.
void read_recurrent_layers(const GgufFile& f, ModelConfig& c);

// qwen35 / qwen35moe: which layers are Gated DeltaNet (attention.recurrent_layers, else
// full_attention_interval), the attention layers' KV heads, and GdnConfig from the ssm.* keys.
// Throws ModelError naming the key: an interval that does not divide the layers, a recurrent
// layer given KV heads, no attention layer, a state size or kernel of 0, heads that do not divide.
void read_gated_delta_net(const GgufFile& f, ModelConfig& c);

// lfm2 with a sliding_window: every attention layer slides (llama.cpp's is_swa = !is_recr),
// whatever sliding_window_pattern says; without one no layer does.
void slide_attention_layers(ModelConfig& c);

}  // namespace kvscope
