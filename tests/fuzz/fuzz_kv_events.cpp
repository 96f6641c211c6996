// libFuzzer target: KV-event payloads and /metrics text as attach reads them from other
// engines (see fuzz_kv_events_one_input.h). Built by scripts/fuzz.sh (KVSCOPE_FUZZ_TARGET=kv_events).
#include "fuzz/fuzz_kv_events_one_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvscope::fuzz_attach::run_one(data, size);
  return 0;
}
