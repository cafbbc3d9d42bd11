// libFuzzer target over the IDX parser (sim/model/idx.h; tools/fuzz.sh runs it briefly after fuzz_scenario): any
// bytes must parse into a consistent result (data size = product of the dimensions) or be refused with a gs::Error
// naming the file and a byte offset inside the input, never crash, hang or allocate more than the input's size.
// The first input byte picks the file kind (images or labels), the rest is the file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sim/core/error.h"
#include "sim/model/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool images = (data[0] & 1) != 0;
  const uint32_t magic = images ? gs::kIdxImagesMagic : gs::kIdxLabelsMagic;
  const int ndims = images ? 3 : 1;
  const std::string path = "<fuzz>";
  try {
    gs::IdxData d = gs::parse_idx(data + 1, size - 1, path, magic, ndims);
    size_t total = 1;
    for (int64_t x : d.dims) total *= static_cast<size_t>(x);
    if (d.data.size() != total || d.data_offset + total != size - 1) {
      std::fprintf(stderr, "inconsistent parse\n");
      std::abort();
    }
    if (!images) {
      try {
        gs::check_idx_labels(d, path, 10);
      } catch (const gs::Error&) {
      }
    }
  } catch (const gs::Error& e) {
    const std::string m = e.what();
    const size_t at = m.find(path + ": byte offset ");
    if (at == std::string::npos || std::strtoull(m.c_str() + at + path.size() + 14, nullptr, 10) > size - 1) {
      std::fprintf(stderr, "refusal without the file and an offset inside the input: %s\n", m.c_str());
      std::abort();
    }
  }
  return 0;
}
