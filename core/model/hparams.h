#pragma once
// Reading a model's integer hyper-parameters from GGUF keys, with errors that name the key: the
// one range check every reader uses, and llama.cpp's "one value or one per layer" keys.
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace kvscope {

// v as int32; throws ModelError "what = v is out of range [lo, hi]" otherwise.
int32_t checked_i32(int64_t v, const std::string& what, int64_t lo, int64_t hi);

// A required integer key as int32 in [lo, hi]; throws ModelError naming the key when it is
// missing or out of range.
int32_t required_i32(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi);

// A key that is one integer for every layer or an array of (at least) one per layer, as n_layer
// values; def when absent (nullptr: required). Throws ModelError naming the key.
std::vector<int64_t> per_layer_ints(const GgufFile& f, const std::string& key, int32_t n_layer, const int64_t* def);

}  // namespace kvscope
