// The IDX reader of idx.h: one header parser shared by the in-memory parser (fuzzed) and the streaming gzip reader.
// Every refusal names the file and a byte offset into the decompressed stream.
#include "sim/model/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace gs {
namespace {

[[noreturn]] void fail(const std::string& path, size_t offset, const std::string& what) {
  throw_error(__FILE__, __LINE__, "a valid IDX file", fmt::format("{}: byte offset {}: {}", path, offset, what));
}

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

size_t header_bytes(int ndims) { return 4 + 4 * static_cast<size_t>(ndims); }

int64_t element_count(const std::vector<int64_t>& dims) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  return total;
}

// Reads up to n bytes; returns how many were read (fewer at the end of the stream). `at` is the decompressed offset
// of out[0], for the error message.
size_t read_bytes(gzFile f, const std::string& path, size_t at, unsigned char* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    const auto want = static_cast<unsigned>(std::min<size_t>(n - done, size_t{1} << 30));
    const int got = gzread(f, out + done, want);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      throw_error(__FILE__, __LINE__, "a valid gzip stream",
                  fmt::format("{}: corrupt gzip data at uncompressed byte offset {} ({})", path, at + done,
                              msg != nullptr ? msg : "zlib error"));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

}  // namespace

std::vector<int64_t> parse_idx_header(const unsigned char* header, size_t size, const std::string& path,
                                      uint32_t magic, int ndims) {
  const size_t need = header_bytes(ndims);
  if (size < 4) fail(path, size, fmt::format("truncated IDX header: the file ends after {} of {} bytes", size, need));
  if (be32(header) != magic) {
    fail(path, 0, fmt::format("bad magic number {} (0x{:08x}); expected {} (0x{:08x}: unsigned bytes, {} "
                              "dimensions)", be32(header), be32(header), magic, magic, ndims));
  }
  if (size < need) fail(path, size, fmt::format("truncated IDX header: the file ends after {} of {} bytes", size, need));
  std::vector<int64_t> dims;
  int64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    const size_t at = 4 + 4 * static_cast<size_t>(d);
    dims.push_back(be32(header + at));
    if (dims.back() == 0) fail(path, at, fmt::format("dimension {} is 0", d));
    if (dims.back() > kIdxMaxElements / total) {  // checked before multiplying: no overflow
      fail(path, at, fmt::format("implausible dimensions: more than {} elements", kIdxMaxElements));
    }
    total *= dims.back();
  }
  return dims;
}

IdxData parse_idx(const unsigned char* bytes, size_t size, const std::string& path, uint32_t magic, int ndims) {
  IdxData out;
  out.dims = parse_idx_header(bytes, size, path, magic, ndims);
  out.data_offset = header_bytes(ndims);
  const auto total = static_cast<size_t>(element_count(out.dims));
  const size_t have = size - out.data_offset;
  if (have < total) {
    fail(path, size, fmt::format("truncated: the header promises {} data bytes from offset {}, the file ends after {}",
                                 total, out.data_offset, have));
  }
  if (have > total) {
    fail(path, out.data_offset + total,
         fmt::format("{} bytes of trailing data after the header's {} data bytes", have - total, total));
  }
  out.data.assign(bytes + out.data_offset, bytes + size);
  return out;
}

IdxData read_idx_file(const std::string& path, uint32_t magic, int ndims) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw_error(__FILE__, __LINE__, "an existing IDX file",
                path + ": file not found (data.path names the folder of the IDX .gz files; \"\" means "
                       "/usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist)");
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw_error(__FILE__, __LINE__, "a readable file", path + ": cannot open (" + std::strerror(errno) + ")");
  }
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  gzbuffer(f, 1u << 20);

  unsigned char header[4 + 4 * 8];
  const size_t need = header_bytes(ndims);
  GS_EXPECT(need <= sizeof(header), "read_idx_file: at most 8 dimensions");
  const size_t got_header = read_bytes(f, path, 0, header, need);
  IdxData out;
  out.dims = parse_idx_header(header, got_header, path, magic, ndims);
  out.data_offset = need;
  const auto total = static_cast<size_t>(element_count(out.dims));
  out.data.resize(total);
  const size_t got = read_bytes(f, path, need, out.data.data(), total);
  if (got != total) {
    fail(path, need + got, fmt::format("truncated: the header promises {} data bytes from offset {}, the file ends "
                                       "after {}", total, need, got));
  }
  unsigned char extra = 0;
  if (read_bytes(f, path, need + total, &extra, 1) != 0) {
    fail(path, need + total, fmt::format("trailing data after the header's {} data bytes", total));
  }
  return out;
}

void check_idx_labels(const IdxData& labels, const std::string& path, int classes) {
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= classes) {
      fail(path, labels.data_offset + i,
           fmt::format("label {} of item {} is outside 0..{}", labels.data[i], i, classes - 1));
    }
  }
}

void check_idx_counts(const IdxData& images, const std::string& images_path, const IdxData& labels,
                      const std::string& labels_path) {
  if (images.dims.empty() || labels.dims.empty() || images.dims[0] != labels.dims[0]) {
    throw_error(__FILE__, __LINE__, "as many labels as images",
                fmt::format("{}: byte offset 4: {} images, but {}: byte offset 4: {} labels", images_path,
                            images.dims.empty() ? 0 : images.dims[0], labels_path,
                            labels.dims.empty() ? 0 : labels.dims[0]));
  }
}

}  // namespace gs
