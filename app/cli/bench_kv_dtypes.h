#pragma once
// kvscope-cli bench --kv-dtypes: the paged decode attention step in several KV dtypes.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "model/model.h"

namespace kvscope::cli {

// One decode token's attention over all layers at context ctx, with the same random K/V stored
// in each dtype of `dtypes` (the first is the baseline). Rounds alternate the dtypes and the
// ratio to the baseline is taken per round, so machine noise moves a round's times together.
nlohmann::json bench_kv_dtype_decode(const Args& a, std::shared_ptr<Model> m, int32_t ctx, int reps,
                                     const std::vector<std::string>& dtypes);

}  // namespace kvscope::cli
