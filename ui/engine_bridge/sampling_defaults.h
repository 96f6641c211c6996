#pragma once
// What a new chat turn is sent with unless its conversation says otherwise: the Settings panel
// edits it, the Chat panel uses it (so neither panel includes the other).
#include "types/sampling_params.h"

namespace kvscope::ui {

struct SamplingDefaults {
  SamplingParams sampling = chat_sampling_defaults();  // local-chat style; greedy is a toggle
  int maxNewTokens = 64;
};

}  // namespace kvscope::ui
