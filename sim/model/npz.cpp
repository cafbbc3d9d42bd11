// The .npz reader and writer (tensor_file.h). An .npz is a zip archive (PKWARE APPNOTE.TXT: local file headers, the
// central directory, the end-of-central-directory record; zip64 extra fields where a size is 0xFFFFFFFF) whose
// entries NAME.npy are NumPy's format (numpy.lib.format): magic "\x93NUMPY", major and minor version, a header
// length (2 bytes little-endian in 1.0, 4 in 2.0 and 3.0), an ASCII Python dict literal padded with spaces and ended
// by '\n', then the array's bytes. Entries are stored (method 0) or deflated (method 8, raw deflate through zlib).
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "kernels/float_formats.h"
#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/model/tensor_file.h"

namespace gs {
namespace {

uint64_t le(const std::string& b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<size_t>(i)]);
  return v;
}

void put(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

struct ZipEntry {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0, local_offset = 0;
};

// The central directory's entries. Throws gs::Error "file: ..." when the archive's records are missing or cut.
std::vector<ZipEntry> central_directory(const std::string& b, const std::string& file) {
  // The end-of-central-directory record: 22 bytes plus a comment of up to 65535, at the end.
  size_t eocd = std::string::npos;
  for (size_t back = 22; back <= std::min<size_t>(b.size(), 22 + 65535); ++back) {
    if (le(b, b.size() - back, 4) == 0x06054b50) {
      eocd = b.size() - back;
      break;
    }
  }
  if (eocd == std::string::npos) throw Error(file + ": not a zip archive (no end-of-central-directory record): truncated?");
  uint64_t count = le(b, eocd + 10, 2), offset = le(b, eocd + 16, 4);
  if ((count == 0xffff || offset == 0xffffffff) && eocd >= 20 && le(b, eocd - 20, 4) == 0x07064b50) {
    const uint64_t z = le(b, eocd - 12, 8);  // the zip64 end-of-central-directory record
    if (z + 56 > b.size() || le(b, static_cast<size_t>(z), 4) != 0x06064b50) throw Error(file + ": a broken zip64 record");
    count = le(b, static_cast<size_t>(z) + 32, 8);
    offset = le(b, static_cast<size_t>(z) + 48, 8);
  }
  std::vector<ZipEntry> out;
  size_t at = static_cast<size_t>(std::min<uint64_t>(offset, b.size()));
  for (uint64_t i = 0; i < count; ++i) {
    if (at + 46 > b.size() || le(b, at, 4) != 0x02014b50)
      throw Error(fmt::format("{}: the zip central directory is cut or broken at entry {}", file, i));
    ZipEntry e;
    e.flags = static_cast<uint16_t>(le(b, at + 8, 2));
    e.method = static_cast<uint16_t>(le(b, at + 10, 2));
    e.crc = static_cast<uint32_t>(le(b, at + 16, 4));
    e.compressed = le(b, at + 20, 4);
    e.size = le(b, at + 24, 4);
    const size_t name_len = le(b, at + 28, 2), extra_len = le(b, at + 30, 2), comment_len = le(b, at + 32, 2);
    e.local_offset = le(b, at + 42, 4);
    if (at + 46 + name_len + extra_len + comment_len > b.size())
      throw Error(fmt::format("{}: the zip central directory is cut at entry {}", file, i));
    e.name = b.substr(at + 46, name_len);
    // zip64 extra field (id 1): the 8-byte values of the fields set to 0xFFFFFFFF, in this order.
    for (size_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = le(b, x, 2), len = le(b, x + 2, 2);
      size_t v = x + 4;
      if (id == 1) {
        for (uint64_t* f : {&e.size, &e.compressed, &e.local_offset})
          if (*f == 0xffffffff && v + 8 <= x + 4 + len) {
            *f = le(b, v, 8);
            v += 8;
          }
      }
      x += 4 + len;
    }
    out.push_back(e);
    at += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

// The uncompressed bytes of an entry, CRC-checked.
std::string entry_bytes(const std::string& b, const ZipEntry& e, const std::string& where) {
  if (e.flags & 1) throw Error(where + ": the entry is encrypted");
  const auto lo = static_cast<size_t>(e.local_offset);
  if (lo + 30 > b.size() || le(b, lo, 4) != 0x04034b50) throw Error(where + ": its local header is missing (truncated?)");
  const size_t data = lo + 30 + le(b, lo + 26, 2) + le(b, lo + 28, 2);
  if (data + e.compressed > b.size())
    throw Error(fmt::format("{}: {} bytes of data past the end of the file (truncated)", where, e.compressed));
  std::string out;
  if (e.method == 0) {
    out = b.substr(data, static_cast<size_t>(e.compressed));
  } else if (e.method == 8) {
    out.resize(static_cast<size_t>(e.size));
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw Error(where + ": zlib could not start inflating");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(b.data() + data));
    z.avail_in = static_cast<uInt>(e.compressed);
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&z, Z_FINISH);
    const uint64_t produced = z.total_out;
    inflateEnd(&z);
    if (rc != Z_STREAM_END || produced != e.size)
      throw Error(fmt::format("{}: the deflated data is corrupt or cut (zlib: {})", where, rc));
  } else {
    throw Error(fmt::format("{}: compression method {} (stored and deflated entries are read)", where, e.method));
  }
  if (out.size() != e.size) throw Error(where + ": its size does not match the zip directory");
  const auto crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size())));
  if (crc != e.crc) throw Error(where + ": CRC-32 mismatch (the file is corrupt)");
  return out;
}

// The value text of 'key': in a .npy header dict ("" when absent).
std::string dict_value(const std::string& h, const std::string& key) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t v = h.find(':', k);
  if (v == std::string::npos) return "";
  ++v;
  while (v < h.size() && h[v] == ' ') ++v;
  if (v >= h.size()) return "";
  const char open = h[v];
  const char close = open == '(' ? ')' : open == '\'' ? '\'' : ',';
  const size_t end = h.find(close, v + 1);
  if (end == std::string::npos) return "";
  return h.substr(v, end - v + (close == ',' ? 0 : 1));
}

FileTensor parse_npy(const std::string& d, const std::string& name, const std::string& where) {
  if (d.size() < 10 || d.compare(0, 6, "\x93NUMPY") != 0) throw Error(where + ": not a .npy array (bad magic)");
  const int major = static_cast<unsigned char>(d[6]);
  if (major < 1 || major > 3) throw Error(fmt::format("{}: .npy format version {} (1, 2 and 3 are read)", where, major));
  const size_t hl_bytes = major == 1 ? 2 : 4, start = 8 + hl_bytes;
  if (d.size() < start) throw Error(where + ": the .npy header is cut");
  const auto hl = static_cast<size_t>(le(d, 8, static_cast<int>(hl_bytes)));
  if (start + hl > d.size()) throw Error(where + ": the .npy header is cut");
  const std::string h = d.substr(start, hl);
  FileTensor t;
  t.name = name;
  std::string descr = dict_value(h, "descr"), fortran = dict_value(h, "fortran_order"), shape = dict_value(h, "shape");
  if (descr.size() < 3 || fortran.empty() || shape.empty())
    throw Error(where + ": the .npy header lacks 'descr', 'fortran_order' or 'shape': " + bounded_text(h, 120));
  t.dtype = descr.substr(1, descr.size() - 2);
  if (fortran.rfind("True", 0) == 0)
    throw Error(where + ": fortran_order True (save a C-ordered array: np.ascontiguousarray)");
  uint64_t count = 1;
  for (size_t i = 1; i + 1 < shape.size();) {
    while (i + 1 < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i + 1 >= shape.size()) break;
    size_t used = 0;
    long long n = -1;
    try {
      n = std::stoll(shape.substr(i), &used);
    } catch (const std::exception&) {
    }
    if (n < 0 || used == 0) throw Error(where + ": the .npy shape " + bounded_text(shape) + " is not a tuple of integers >= 0");
    if (n != 0 && count > (uint64_t{1} << 40) / static_cast<uint64_t>(n)) throw Error(where + ": the shape is too large");
    count *= static_cast<uint64_t>(n);
    t.shape.push_back(n);
    i += used;
  }
  const char order = t.dtype.empty() ? '?' : t.dtype[0];
  const std::string kind = t.dtype.size() > 1 ? t.dtype.substr(1) : "";
  const size_t width = kind == "f4" ? 4 : kind == "f8" ? 8 : kind == "f2" ? 2 : 0;
  if (width == 0 || (order != '<' && order != '>' && order != '='))
    throw Error(fmt::format("{}: dtype '{}' is not read ('<f4'; '<f8' and '<f2' are converted to float32)", where,
                            bounded_text(t.dtype, 20)));
  if (d.size() - start - hl != count * width)
    throw Error(fmt::format("{}: {} data bytes, shape {} of '{}' needs {}", where, d.size() - start - hl, shape,
                            t.dtype, count * width));
  const StoredFloat format = width == 4 ? StoredFloat::kF32 : width == 8 ? StoredFloat::kF64 : StoredFloat::kF16;
  decode_floats(reinterpret_cast<const unsigned char*>(d.data()) + start + hl, static_cast<size_t>(count), format,
                order == '>', t.values);
  return t;
}

}  // namespace

TensorFile parse_npz(const std::string& bytes, const std::string& file) {
  TensorFile out;
  for (const ZipEntry& e : central_directory(bytes, file)) {
    const std::string where = fmt::format("{}: entry \"{}\"", file, bounded_text(e.name));
    const bool npy = e.name.size() > 4 && e.name.compare(e.name.size() - 4, 4, ".npy") == 0;
    if (!npy) throw Error(where + ": not a .npy entry (an .npz holds NAME.npy arrays)");
    out.tensors.push_back(parse_npy(entry_bytes(bytes, e, where), e.name.substr(0, e.name.size() - 4), where));
  }
  return out;
}

std::string npz_bytes(const std::vector<OutIntArray>& arrays) {
  std::string out, directory;
  for (const OutIntArray& a : arrays) {
    // A Python tuple as numpy writes it: (2, 3), (4,), ().
    std::string shape = "(";
    uint64_t count = 1;
    for (size_t i = 0; i < a.shape.size(); ++i) {
      shape += fmt::format("{}{}", i ? ", " : "", a.shape[i]);
      count *= static_cast<uint64_t>(a.shape[i]);
    }
    shape += a.shape.size() == 1 ? ",)" : ")";
    std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': " + shape + ", }";
    header.append(64 - (10 + header.size() + 1) % 64, ' ');  // total header a multiple of 64 bytes, as numpy pads it
    header += '\n';
    std::string npy = std::string("\x93NUMPY\x01\x00", 8);
    put(npy, header.size(), 2);
    npy += header;
    npy.append(reinterpret_cast<const char*>(a.values), static_cast<size_t>(4 * count));
    const std::string name = a.name + ".npy";
    if (npy.size() >= 0xffffffffull || out.size() >= 0xffffffffull)
      throw Error(fmt::format("{}: {} bytes need a zip64 archive, which this writer does not write", name, npy.size()));
    const auto crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(npy.data()), static_cast<uInt>(npy.size())));
    const uint64_t local = out.size();
    // Local file header: version 2.0, no flags, stored, 1980-01-01 00:00 (fixed, so equal arrays give equal files).
    put(out, 0x04034b50, 4), put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0x21, 2);
    put(out, crc, 4), put(out, npy.size(), 4), put(out, npy.size(), 4), put(out, name.size(), 2), put(out, 0, 2);
    out += name;
    out += npy;
    put(directory, 0x02014b50, 4), put(directory, 20, 2), put(directory, 20, 2), put(directory, 0, 2);
    put(directory, 0, 2), put(directory, 0, 2), put(directory, 0x21, 2), put(directory, crc, 4);
    put(directory, npy.size(), 4), put(directory, npy.size(), 4), put(directory, name.size(), 2);
    put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 4);
    put(directory, local, 4);
    directory += name;
  }
  const uint64_t dir_offset = out.size();
  out += directory;
  put(out, 0x06054b50, 4), put(out, 0, 2), put(out, 0, 2), put(out, arrays.size(), 2), put(out, arrays.size(), 2);
  put(out, directory.size(), 4), put(out, dir_offset, 4), put(out, 0, 2);
  return out;
}

}  // namespace gs
