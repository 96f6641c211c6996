// libFuzzer target: an arbitrary byte string as a model file (see fuzz_one_input.h for the
// chain and what counts as a finding). Built and run by scripts/fuzz.sh, not by CMake.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_one_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)kvscope::fuzz::run_one(data, size);
  return 0;
}
