#include "widgets/kv_dtype_tooltips.h"

#include <QComboBox>
#include <algorithm>
#include <QLocale>
#include <QObject>
#include <QVariant>

#include "kv/kv_layout.h"

namespace kvscope::ui {

QString eviction_tooltip() {
  return QObject::tr(
      "Token eviction, as <tt>--evict</tt>: <b>POLICY:BUDGET[:WINDOW][:layer]</b>, or empty / <tt>off</tt> for none.<br>"
      "BUDGET: tokens a sequence keeps, or a share of its prompt (<tt>20%</tt>).<br>"
      "<b>h2o</b> (Heavy-Hitter Oracle): after every step, drops the tokens with the least attention received so "
      "far, never the sinks or the WINDOW most recent tokens (default: half the budget).<br>"
      "<b>snapkv</b>: once, when the prompt is in, keeps the tokens the prompt's last WINDOW queries (default 32) "
      "attended to most; generation then grows the cache again.<br>"
      "<b>:layer</b>: every layer keeps its own BUDGET tokens by its own attention (as the H2O paper); a slot is "
      "freed only once no layer keeps it, so memory is the union of the layers' choices. Default: one choice per "
      "sequence for all layers.<br>"
      "With eviction, Sinks are the first tokens never evicted and Sliding window is the recent window (when the "
      "spec names none), not an attention window. Needs the paged cache and a non-KIVI dtype.");
}

QString kv_dtype_tooltip(KvDtype d, const KvShape& shape, int blockSize) {
  QString what;
  switch (d) {
    case KvDtype::F32:
      what = QObject::tr("4 bytes per element, exact");
      break;
    case KvDtype::F16:
      what = QObject::tr("2 bytes per element (IEEE half precision)");
      break;
    case KvDtype::BF16:
      what = QObject::tr("2 bytes per element (bfloat16: f32's range, 8 mantissa bits)");
      break;
    case KvDtype::INT8:
      what = QObject::tr("1 byte per element plus one f32 scale per (token, KV head) vector");
      break;
    case KvDtype::FP8_E4M3:
      what = QObject::tr("1 byte per element (FP8 E4M3) plus one f32 scale per (token, KV head) vector");
      break;
    case KvDtype::FP8_E5M2:
      what = QObject::tr(
          "1 byte per element (FP8 E5M2: more range, less precision) plus one f32 scale per (token, KV head) vector");
      break;
    case KvDtype::INT4:
      what = QObject::tr("4 bits per element, symmetric, one f16 scale per group of channels");
      break;
    case KvDtype::ROT4:
      what = QObject::tr(
          "4 bits per element after a fixed Walsh-Hadamard rotation (spreads outlier channels), f16 scale per group");
      break;
    case KvDtype::ROT4C:
      what = QObject::tr(
          "rot4 with each block's keys centered on their mean first and scales fitted to the least error; "
          "a filling block stays in f16 (CPU backend)");
      break;
    case KvDtype::KIVI4:
    case KvDtype::KIVI2:
      what =
          QObject::tr("KIVI, %1 bits: keys per channel over each block, values per token; a filling block stays in f16")
              .arg(kv_code_bits(d));
      break;
  }
  QString tip = QStringLiteral("<b>%1</b>: %2.").arg(QString::fromLatin1(kv_dtype_name(d)), what);
  if (!shape.valid()) return tip + QObject::tr("<br>Load a model to see its bytes per token.");
  KvLayout l;
  l.n_layer = shape.nLayer;
  l.n_head_kv = shape.nHeadKv;
  l.head_dim = shape.headDim;
  l.block_size = std::max(1, blockSize);
  l.dtype = d;
  l.latent = shape.latentRank > 0;
  KvLayout f32 = l;
  f32.dtype = KvDtype::F32;
  if (l.latent) {
    if (kv_dtype_packed(d))
      return tip + QObject::tr("<br>Not for the loaded model: ") + QString::fromStdString(latent_packed_problem(d));
    tip += QObject::tr(
               "<br>Loaded model (latent attention): %1 layers × 1 row of (%2 latent + %3 RoPE key) × %4 bytes%5 = "
               "<b>%6 bytes per token</b>, key and value at once")
               .arg(shape.nLayer)
               .arg(shape.latentRank)
               .arg(shape.headDim - shape.latentRank)
               .arg(kv_elem_bytes(d))
               .arg(kv_dtype_scaled(d) ? QStringLiteral(" + 4") : QString())
               .arg(QLocale(QLocale::English).toString(static_cast<qlonglong>(l.bytes_per_token())));
    return tip + QLatin1Char('.');
  }
  if (shape.swaLayers > 0) {  // gemma4: each kind of layer with its own head shape
    KvLayout swa = l;
    swa.n_layer = shape.swaLayers;
    swa.n_head_kv = shape.swaHeadKv;
    swa.head_dim = shape.swaHeadDim;
    tip += QObject::tr(
               "<br>Loaded model: %1 full layers × %2 KV heads × %3 + %4 sliding layers × %5 KV heads × %6 values, "
               "K and V = <b>%7 bytes per token</b> (layers that read another layer's KV store none)")
               .arg(shape.nLayer)
               .arg(shape.nHeadKv)
               .arg(shape.headDim)
               .arg(shape.swaLayers)
               .arg(shape.swaHeadKv)
               .arg(shape.swaHeadDim)
               .arg(QLocale(QLocale::English)
                        .toString(static_cast<qlonglong>(l.bytes_per_token() + swa.bytes_per_token())));
    return tip + QLatin1Char('.');
  }
  const QString vec = kv_dtype_packed(d) ? QStringLiteral("%1 / 2 (codes, scales, mins)")
                                               .arg(kv_bytes_per_token_head(d, shape.headDim, l.block_size, 0))
                      : kv_dtype_scaled(d) ? QStringLiteral("(%1 × %2 + 4)").arg(shape.headDim).arg(kv_elem_bytes(d))
                                           : QStringLiteral("%1 × %2").arg(shape.headDim).arg(kv_elem_bytes(d));
  tip += QObject::tr("<br>Loaded model: 2 (K and V) × %1 layers × %2 KV heads × %3 bytes = <b>%4 bytes per token</b>")
             .arg(shape.nLayer)
             .arg(shape.nHeadKv)
             .arg(vec)
             .arg(QLocale(QLocale::English).toString(static_cast<qlonglong>(l.bytes_per_token())));
  if (blockSize > 0)
    tip += QObject::tr(", %1 bytes per %2-token block")
               .arg(QLocale(QLocale::English).toString(static_cast<qlonglong>(l.bytes_per_block())))
               .arg(blockSize);
  if (d != KvDtype::F32)
    tip += QObject::tr(" (%1% of f32)")
               .arg(100.0 * static_cast<double>(l.bytes_per_token()) / static_cast<double>(f32.bytes_per_token()), 0,
                    'f', 1);
  return tip + QLatin1Char('.');
}

KvShape kv_shape_of(const ModelConfig& c) {
  KvShape s{c.n_layer, c.n_head_kv, c.head_dim, c.mla.kv_lora_rank};
  if (c.shapes.empty() && c.recurrent.empty()) return s;
  s.nLayer = 0;
  for (int32_t il = 0; il < c.n_layer; ++il) {
    if (!c.layer_keeps_kv(il)) continue;
    if (!c.layer_is_swa(il) || c.shapes.empty()) {
      ++s.nLayer;
      continue;
    }
    ++s.swaLayers;
    s.swaHeadKv = c.layer_n_head_kv(il);
    s.swaHeadDim = c.layer_head_dim(il);
  }
  return s;
}

void set_kv_dtype_tooltips(QComboBox* box, const KvShape& shape, int blockSize) {
  for (int i = 0; i < box->count(); ++i) {
    const QString name = box->itemData(i).isValid() ? box->itemData(i).toString() : box->itemText(i);
    const auto d = parse_kv_dtype(name.toStdString());
    box->setItemData(i, d ? kv_dtype_tooltip(*d, shape, blockSize) : QVariant(), Qt::ToolTipRole);
  }
}

}  // namespace kvscope::ui
