// The ten guided lessons (issue 18, "Guided lessons"), as data. Texts stay short and plain:
// each step is one idea, and the last names what to look at.
#include "lessons/lesson.h"

#include <QObject>

// A lesson names only the fields it uses; the rest keep their defaults (GCC warns about every
// designated initializer that leaves one out).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kvscope::ui {

namespace {

QString tr(const char* s) { return QObject::tr(s); }

QList<Lesson> make_lessons() {
  QList<Lesson> l;
  l.push_back(
      {.number = 1,
       .title = tr("Why a KV cache"),
       .scenario = QStringLiteral("tiny-completions"),
       .steps =
           {tr("A model writes one token at a time, and each new token attends to every token before it."),
            tr("Without a cache, every step recomputes the keys and values of the whole sequence: token n costs n, "
               "so n tokens cost about n²/2. That is O(n²)."),
            tr("The KV cache stores each token's keys and values once. A step then computes only the new token: "
               "flat cost per token, O(n) in total."),
            tr("Look at the No KV cache panel: the same prompt runs both ways. Tokens computed per step grow in a "
               "line without the cache and stay at 1 with it, and both runs write the same text."),
            tr("Press Step: the engine stores the new tokens' K/V in blocks, and the caption says which.")},
       .lookAt = QStringLiteral("noCacheDock"),
       .runNoCacheComparison = true});
  l.push_back(
      {.number = 2,
       .title = tr("How big it is"),
       .scenario = QStringLiteral("tiny-completions"),
       .steps = {tr("Per token the cache holds 2 (K and V) × layers × KV heads × head size × bytes per element."),
                 tr("A 70B model (80 layers, 64 heads of 128, f16) at 128K tokens: 2.5 MiB per token, 320 GiB for one "
                    "sequence: more than twice the model's own f16 weights."),
                 tr("Grouped-query attention shares 8 KV heads among the 64 query heads: 320 KiB per token, 40 GiB. "
                    "That is the figure real servers plan with."),
                 tr("Look at the KV calculator: the formula with both numbers. The status bar and the Settings panel's "
                    "KV dtype list give the loaded model's own bytes per token.")},
       .lookAt = QStringLiteral("plannerDock")});
  l.push_back(
      {.number = 3,
       .title = tr("Pre-allocation waste"),
       .settings = {{QStringLiteral("baseline"), QStringLiteral("on")},
                    {QStringLiteral("baseline-reserve"), QStringLiteral("max-model-len")}},
       .scenario = QStringLiteral("many-short-chats"),
       .steps =
           {tr("Before paging, a server reserved one contiguous run of memory per request, as long as the longest "
               "sequence it might ever need."),
            tr("Most requests stop far earlier, so most of each reservation stays empty: reserved is not used."),
            tr("Press Step a few times, or Play: the Fragmentation panel shows reserved slots against filled ones."),
            tr("Then untick \"contiguous baseline\" in Settings and Apply: with paging only each sequence's last "
               "block is partly empty.")},
       .lookAt = QStringLiteral("fragDock")});
  l.push_back(
      {.number = 4,
       .title = tr("Fragmentation"),
       .settings = {{QStringLiteral("baseline"), QStringLiteral("on")},
                    {QStringLiteral("baseline-reserve"), QStringLiteral("request")}},
       .scenario = QStringLiteral("many-short-chats"),
       .steps = {tr("Reserving each request's own worst case wastes less, but the reservations differ in size."),
                 tr("When a request finishes it leaves a hole between live reservations. A new request may not fit in "
                    "any one hole although the free memory adds up to enough: external fragmentation."),
                 tr("The scheduler then has to keep it waiting: a blocked admission."),
                 tr("Play the run and look at the Fragmentation panel: the free memory map with its holes, and the "
                    "count of admissions blocked by fragmentation.")},
       .lookAt = QStringLiteral("fragDock")});
  l.push_back(
      {.number = 5,
       .title = tr("Paging"),
       .settings = {{QStringLiteral("kv-blocks"), QStringLiteral("96")}},
       .scenario = QStringLiteral("pool-pressure"),
       .steps =
           {tr("Paging cuts the cache into fixed blocks (16 tokens here). A sequence owns a block table: the list of "
               "its blocks, anywhere in the pool."),
            tr("Blocks are taken on demand, one when the last one is full, so nothing is reserved ahead."),
            tr("When the pool runs dry, the scheduler preempts a sequence: its blocks are freed and it is "
               "recomputed later."),
            tr("Look at the block map: each colour is one sequence. Click a sequence in its list to number its "
               "blocks in order, and Step to watch blocks arrive and preemptions free them.")},
       .lookAt = QStringLiteral("blockMap")});
  l.push_back(
      {.number = 6,
       .title = tr("Prefix caching"),
       .settings = {{QStringLiteral("kv-blocks"), QStringLiteral("64")}},
       .scenario = QStringLiteral("shared-system-prompt"),
       .steps =
           {tr("Many requests start with the same text, such as a system prompt."),
            tr("A full block is named by the hash of its tokens and of every token before it. A later request with "
               "the same prefix attaches those blocks instead of computing them: a prefix hit."),
            tr("Blocks nobody uses stay cached until the pool needs the room; then the least recently used are "
               "evicted."),
            tr("Look at the Prefix sharing panel: the tree of cached blocks grows, hit counts rise with each "
               "question, and eviction prunes leaves when the small pool fills.")},
       .lookAt = QStringLiteral("prefixDock")});
  l.push_back(
      {.number = 7,
       .title = tr("Sliding window and sinks"),
       .settings = {{QStringLiteral("window"), QStringLiteral("64")}, {QStringLiteral("sinks"), QStringLiteral("4")}},
       .scenario = QStringLiteral("many-short-chats"),
       .steps =
           {tr("With a sliding window of 64 tokens, attention sees only the last 64 positions; a block wholly older "
               "than that is freed at once, so a long sequence holds a bounded number of blocks."),
            tr("Attention sinks keep the first 4 tokens visible and stored forever: models lean on them, and "
               "dropping them hurts more than the window alone."),
            tr("Step and look at the block map: blocks leave behind each growing sequence (\"slid out\") while its "
               "first block stays."),
            tr("The quality cost: Compare is set to B = full attention with a quality run. Run it for perplexity and "
               "KL of the windowed model against full attention.")},
       .lookAt = QStringLiteral("blockMap"),
       .compareB = {.window = 0, .sinks = 0},
       .compareQuality = true});
  l.push_back(
      {.number = 8,
       .title = tr("Quantization"),
       .settings = {{QStringLiteral("kv-dtype"), QStringLiteral("int8")}},
       .scenario = QStringLiteral("tiny-completions"),
       .steps =
           {tr("Storing keys and values in fewer bits fits more tokens in the same memory."),
            tr("int8 and fp8 use 1 byte per element plus one scale per vector: about a quarter of f32. The 4-bit "
               "formats go further: int4, rot4 (rotated first, so outlier channels hurt less), rot4c (rot4 with "
               "each block's keys centered first), kivi4 and kivi2 (keys per channel, values per token)."),
            tr("Hover the KV dtype list in Settings for each format's bytes per token on the loaded model."),
            tr("Fewer bits cost accuracy. Compare is set to B = kivi4 with a quality run: Run it for bytes against "
               "KL. Try B = f32, rot4, rot4c or kivi2 too.")},
       .lookAt = QStringLiteral("compareDock"),
       .compareB = {.kvDtype = KvDtype::KIVI4},
       .compareQuality = true});
  l.push_back(
      {.number = 9,
       .title = tr("Latent KV"),
       .scenario = QStringLiteral("tiny-completions"),
       .steps =
           {tr("Grouped-query attention caches a key and a value for every KV head. DeepSeek's multi-head latent "
               "attention caches one compressed row per token instead: a latent, plus a small RoPE key."),
            tr("Every head reads that one row: its query is turned into the latent's space first, and its output "
               "turned back. So the cache no longer grows with the number of heads."),
            tr("The Latent KV panel runs the same prompt through two small models of the same width, each with the "
               "same KV memory. Compare the bytes per token and the blocks that memory holds."),
            tr("DeepSeek-V3 caches 68.6 KiB per token: pick its preset in the KV calculator. Its second column counts "
               "the same model as multi-head, every head's key and value cached: 4.8 MiB per token.")},
       .lookAt = QStringLiteral("latentDock"),
       .runLatentComparison = true});
  l.push_back(
      {.number = 10,
       .title = tr("Why Qwen3.5's cache barely grows"),
       .scenario = QStringLiteral("tiny-completions"),
       .steps =
           {tr("Qwen3.5 is a hybrid: three layers in four are Gated DeltaNet, which fold every token into a "
               "fixed-size state instead of keeping its key and value. Only every fourth layer is attention with a "
               "KV cache."),
            tr("So a sequence costs a fixed state (paid once, at any length) plus a small KV per token. A short "
               "sequence costs more than in a plain model; a long one much less."),
            tr("The Hybrid state panel runs one long prompt through a small qwen35 and a qwen3 of the same width: "
               "memory held at each length, both curves, and the break-even length where they cross."),
            tr("Load a hybrid model and the block map grows a strip of state slots (one per running sequence) and "
               "checkpoints (saved states a prefix hit restores); the memory panel splits fixed from per-token "
               "bytes. The KV calculator's Qwen3.5 presets say how many sequences fit.")},
       .lookAt = QStringLiteral("hybridDock"),
       .runHybridComparison = true});
  return l;
}

}  // namespace

const LessonSettings& lesson_base_settings() {
  static const LessonSettings base = {
      {QStringLiteral("block-size"), QStringLiteral("16")},
      {QStringLiteral("kv-blocks"), QStringLiteral("256")},
      {QStringLiteral("kv-dtype"), QStringLiteral("f32")},
      {QStringLiteral("window"), QStringLiteral("0")},
      {QStringLiteral("sinks"), QStringLiteral("0")},
      {QStringLiteral("prefix-caching"), QStringLiteral("on")},
      {QStringLiteral("baseline"), QStringLiteral("off")},
      {QStringLiteral("baseline-reserve"), QStringLiteral("max-model-len")},
      {QStringLiteral("evict"), QStringLiteral("off")}};  // a lesson never runs with a leftover token eviction
  return base;
}

const QList<Lesson>& builtin_lessons() {
  static const QList<Lesson> lessons = make_lessons();
  return lessons;
}

const Lesson* find_lesson(int number) {
  for (const Lesson& l : builtin_lessons())
    if (l.number == number) return &l;
  return nullptr;
}

}  // namespace kvscope::ui
