// Tensor files PyTorch users exchange: safetensors (read and write) and NumPy .npz archives (read, and write of
// int32 / float32 arrays), each as a small reader of the documented format (docs/parity.md, "Files"):
//
//   safetensors  8-byte little-endian header length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets":
//                [begin, end]}, "__metadata__": {string: string}}, then the byte buffer the offsets index (relative
//                to its start, row-major, little-endian). Every byte of the buffer belongs to exactly one tensor.
//   .npz         a zip archive (entries stored or deflated) of .npy files: "\x93NUMPY", version, header length,
//                a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }, the data.
//
// Values are read as float32: F32 / '<f4' exactly; F64, F16 and BF16 ('<f8', '<f2') converted (F16 and BF16
// exactly, F64 rounded to nearest); any other dtype is refused. Every error is a gs::Error "FILE: what" that names
// the tensor where there is one.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gs {

// One tensor read from a file, converted to float32 (row-major, `shape`'s product values).
struct FileTensor {
  std::string name;
  std::string dtype;            // as the file names it: "F32", "F64", "F16", "BF16" (npz: "<f4", "<f8", "<f2", ...)
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// A whole file: its tensors in file order (safetensors: by data offset; npz: archive order) and its metadata
// (safetensors' "__metadata__"; empty for npz).
struct TensorFile {
  std::vector<FileTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses safetensors bytes. `file` names the source in messages. Throws gs::Error "file: ..." for a truncated file,
// a header length past the end or above 100,000,000 bytes (the format's own limit), a header that is not a JSON
// object, a duplicate name, an entry without a string dtype / a shape of integers >= 0 / data_offsets [begin, end],
// offsets whose size is not shape x dtype bytes, a buffer with holes, overlaps or bytes no tensor indexes, a dtype
// other than F32, F64, F16, BF16.
TensorFile parse_safetensors(const std::string& bytes, const std::string& file);

// Parses .npz bytes (a zip of NAME.npy entries; NAME is the tensor's name). Throws gs::Error "file: ..." for a file
// that is no zip archive, an entry that is encrypted, compressed other than stored/deflated, truncated or fails its
// CRC-32, a .npy with a bad magic, header or size, fortran_order True, or a dtype other than '<f4', '<f8', '<f2'
// (either byte order).
TensorFile parse_npz(const std::string& bytes, const std::string& file);

// Reads `path` (a regular file of at most kMaxTensorFileBytes) and parses it by content: a zip archive is an .npz,
// anything else is taken for safetensors. Throws gs::Error "path: ..." (missing, a folder, unreadable, too large, or
// the parsers' errors).
TensorFile read_tensor_file(const std::string& path);
constexpr uint64_t kMaxTensorFileBytes = 17ull << 30;  // 2^32 float32 parameters (kMaxParams) and their header

// The float formats both readers convert, and the one element decoder they share: `count` elements of `format`
// from `bytes` (`width` bytes each, little-endian unless `big_endian`) into `out` as float32 (F32 exactly, F16 and
// BF16 exactly, F64 rounded to nearest). The caller has checked that the bytes are there.
enum class StoredFloat { kF32, kF64, kF16, kBF16 };
void decode_floats(const unsigned char* bytes, size_t count, StoredFloat format, bool big_endian,
                   std::vector<float>& out);

// A float32 tensor to write: row-major values of shape's product elements.
struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* values = nullptr;
};

// The bytes of a safetensors file holding `tensors` as F32 in the given order (data offsets consecutive from 0, the
// header padded with spaces to a multiple of 8 bytes, as the reference writer does) and `metadata` under
// "__metadata__" (omitted when empty).
std::string safetensors_bytes(const std::vector<OutTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// An int32 array to write into an .npz.
struct OutIntArray {
  std::string name;  // the entry is NAME.npy; np.load(file)[NAME] reads it
  std::vector<int64_t> shape;
  const int32_t* values = nullptr;
};

// The bytes of an .npz archive (zip entries stored, no compression; .npy format 1.0, dtype '<i4', C order) holding
// `arrays`, as np.savez writes it. Throws gs::Error when the archive would need zip64 (an entry of 4 GiB or more).
std::string npz_bytes(const std::vector<OutIntArray>& arrays);

}  // namespace gs
