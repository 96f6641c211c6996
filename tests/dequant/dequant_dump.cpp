// Dequantizes a file of raw ggml blocks with kvscope's dequantize_row and writes the f32 values
// (little endian) to another file: the C++ half of test_dequant_peer.py, which compares them
// with the gguf package's numpy dequantizers.
// usage: dequant_dump TYPE_ID IN_BLOCKS OUT_F32
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/ggml_types.h"

int main(int argc, char** argv) {
  using namespace kvscope;
  if (argc != 4) {
    std::fprintf(stderr, "usage: dequant_dump TYPE_ID IN_BLOCKS OUT_F32\n");
    return 2;
  }
  const auto type = static_cast<GgmlType>(std::strtoul(argv[1], nullptr, 10));
  const GgmlTypeInfo info = ggml_type_info(type);
  std::ifstream in(argv[2], std::ios::binary);
  const std::vector<uint8_t> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (info.block_bytes == 0 || raw.size() % info.block_bytes != 0) {
    std::fprintf(stderr, "dequant_dump: %zu bytes are not whole blocks of %s\n", raw.size(), info.name);
    return 2;
  }
  const int64_t n = static_cast<int64_t>(raw.size() / info.block_bytes) * info.block_elems;
  std::vector<float> out(static_cast<size_t>(n));
  try {
    dequantize_row(type, raw.data(), out.data(), n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dequant_dump: %s\n", e.what());
    return 1;
  }
  std::ofstream(argv[3], std::ios::binary).write(reinterpret_cast<const char*>(out.data()), n * 4);
  return 0;
}
