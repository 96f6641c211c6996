// libFuzzer target: chat templates through the Jinja engine (see fuzz_jinja_one_input.h).
// Built by scripts/fuzz.sh (KVSCOPE_FUZZ_TARGET=jinja).
#include "fuzz/fuzz_jinja_one_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvscope::fuzz_jinja::run_one(data, size);
  return 0;
}
