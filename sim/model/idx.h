// The IDX file format (LeCun's MNIST files): parsing from memory and reading gzip'd or plain files, with every
// refusal naming the file and the byte offset. Used by fashion_mnist.cpp; fuzzed by tests/fuzz/fuzz_idx.cpp. Another
// IDX element type would be one more magic number here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gs {

constexpr uint32_t kIdxImagesMagic = 2051;  // 0x00000803: unsigned bytes, 3 dimensions (count, rows, cols)
constexpr uint32_t kIdxLabelsMagic = 2049;  // 0x00000801: unsigned bytes, 1 dimension (count)
// Largest element count accepted from a header (64 GiB): above it the header is implausible, not the data large.
constexpr int64_t kIdxMaxElements = int64_t{1} << 36;

// One IDX file of unsigned bytes: its dimensions (big-endian uint32 each in the file) and prod(dims) data bytes.
struct IdxData {
  std::vector<int64_t> dims;
  std::vector<unsigned char> data;
  size_t data_offset = 0;  // byte offset of data[0] in the (decompressed) file: 4 + 4 * dims.size()
};

// Checks an IDX header: magic number (exactly `magic`), `ndims` dimensions, each > 0, product <= kIdxMaxElements.
// header holds the first `size` bytes of the file (at least 4 + 4 * ndims for success). Returns the dimensions.
// Throws gs::Error "<path>: byte offset <n>: <what is wrong>" (truncated header, bad magic, zero or implausible
// dimension).
std::vector<int64_t> parse_idx_header(const unsigned char* header, size_t size, const std::string& path,
                                      uint32_t magic, int ndims);

// Parses a whole (decompressed) IDX file held in memory: header as above, then exactly prod(dims) data bytes (a
// shorter buffer is refused as truncated, a longer one as trailing data, both with the byte offset). Never allocates
// more than `size` bytes. Throws gs::Error as parse_idx_header.
IdxData parse_idx(const unsigned char* bytes, size_t size, const std::string& path, uint32_t magic, int ndims);

// Reads the file at path (gzip, or plain: zlib reads both) and parses it as parse_idx, streaming so a lying header
// cannot make it allocate more than the header promises up to kIdxMaxElements. Errors as parse_idx, plus "file not
// found", "cannot open" and "corrupt gzip data at uncompressed byte offset <n>".
IdxData read_idx_file(const std::string& path, uint32_t magic, int ndims);

// Labels in [0, classes): throws gs::Error "<path>: byte offset <n>: label <l> of item <i> is outside 0..classes-1".
void check_idx_labels(const IdxData& labels, const std::string& path, int classes);

// Image/label count agreement: throws gs::Error naming both files and the count field's offset (byte 4) of each.
void check_idx_counts(const IdxData& images, const std::string& images_path, const IdxData& labels,
                      const std::string& labels_path);

}  // namespace gs
