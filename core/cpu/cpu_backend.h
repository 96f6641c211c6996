#pragma once
// The CPU backend: f32 activations, weights read in their GGUF type through quant_dot, the KV
// block pool in host memory, paged attention that walks each sequence's block table.
#include <memory>
#include <vector>

#include "cpu/cpu_kv_storage.h"
#include "cpu/thread_pool.h"
#include "engine/backend.h"
#include "model/model.h"

namespace kvscope {

class CpuBackend : public Backend {
 public:
  CpuBackend(std::shared_ptr<const Model> model, int n_threads = 0);
  std::string name() const override;
  void init_kv(const KvLayout& layout, const AttentionPolicy& policy) override;
  const KvLayout& kv_layout() const override { return kv_.layout(); }
  void forward(const BatchView& batch, float* logits) override;
  void copy_blocks(std::span<const BlockCopy> copies) override;
  ThreadPool& pool() { return pool_; }
  // Paged attention of one layer over the whole batch (public so benchmarks can time it alone).
  void attention(int32_t layer, const BatchView& batch, const float* q, float* out);

 private:
  int32_t layer_window(int32_t layer) const;
  void attend_one(int32_t layer, const BatchView& batch, int32_t token, int32_t head, const float* q, float* out,
                  std::vector<float>& scores, std::vector<float>& tile) const;

  std::shared_ptr<const Model> model_;
  ThreadPool pool_;
  CpuKvStorage kv_;
  AttentionPolicy policy_;
  // Scratch, reused across steps: [n_tokens][...]
  std::vector<float> x_, xn_, q_, k_, v_, att_, o_, gate_, up_, ffn_;
  std::vector<std::vector<float>> scores_, tiles_;  // per thread
};

}  // namespace kvscope
