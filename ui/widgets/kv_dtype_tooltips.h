#pragma once
// What a KV dtype or a token-eviction spec costs and means, as tooltips: the Settings and
// Compare panels' KV dtype boxes and eviction fields share them.
#include <QString>

#include "kv/kv_dtype.h"
#include "model/model_config.h"

class QComboBox;

namespace kvscope::ui {

// The KV shape of the loaded model (0s: none loaded), enough to price any KV dtype.
struct KvShape {
  int nLayer = 0, nHeadKv = 0, headDim = 0;
  int latentRank = 0;  // latent attention (MLA): the row's latent part; 0 otherwise
  // gemma4: the sliding layers that keep KV, with their own head shape (nLayer then counts the
  // full layers that keep KV); 0 when every layer has the model-wide shape.
  int swaLayers = 0, swaHeadKv = 0, swaHeadDim = 0;
  bool valid() const { return nLayer > 0 && nHeadKv > 0 && headDim > 0; }
};
// The loaded model's shape: layers that borrow another layer's KV are not counted.
KvShape kv_shape_of(const ModelConfig& c);
// Bytes per token (and per block when blockSize > 0) of `d` for `shape`, from KvLayout: what a
// KV dtype choice costs on the loaded model. Without a model, the per-element cost only.
QString kv_dtype_tooltip(KvDtype d, const KvShape& shape, int blockSize);
// What a token-eviction spec is and what the two policies do (Settings and Compare fields).
QString eviction_tooltip();
// Sets every item's tooltip of a KV dtype combo box whose item data or text is the dtype name.
void set_kv_dtype_tooltips(QComboBox* box, const KvShape& shape, int blockSize);

}  // namespace kvscope::ui
