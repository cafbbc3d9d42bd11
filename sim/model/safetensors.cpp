// The safetensors reader and writer (tensor_file.h), and read_tensor_file. The format is the one documented by the
// safetensors project: an 8-byte little-endian unsigned header length N, N bytes of UTF-8 JSON (an object: tensor
// name -> {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__": {string: string}), then the byte
// buffer; offsets are relative to the buffer's start, tensors are row-major little-endian, and the buffer is fully
// indexed (no holes, no overlaps). The header length is limited to 100,000,000 bytes, as the reference reader does.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "kernels/float_formats.h"
#include "sim/core/error.h"
#include "sim/core/json_io.h"
#include "sim/model/tensor_file.h"

namespace gs {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100000000;

uint64_t load_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Bytes per element of a dtype this reader converts (0: not read).
size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F64") return 8;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

}  // namespace

void decode_floats(const unsigned char* bytes, size_t count, StoredFloat format, bool big_endian,
                   std::vector<float>& out) {
  const size_t width = format == StoredFloat::kF64 ? 8 : format == StoredFloat::kF32 ? 4 : 2;
  out.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* p = bytes + i * width;
    uint64_t u = 0;
    for (size_t k = 0; k < width; ++k) u |= static_cast<uint64_t>(p[big_endian ? width - 1 - k : k]) << (8 * k);
    switch (format) {
      case StoredFloat::kF32: {
        const auto w = static_cast<uint32_t>(u);
        std::memcpy(&out[i], &w, 4);
        break;
      }
      case StoredFloat::kF64: {
        double d = 0;
        std::memcpy(&d, &u, 8);
        out[i] = static_cast<float>(d);
        break;
      }
      case StoredFloat::kF16: out[i] = fp16_to_fp32(static_cast<uint16_t>(u)); break;
      case StoredFloat::kBF16: out[i] = bf16_to_fp32(static_cast<uint16_t>(u)); break;
    }
  }
}

namespace {

nlohmann::json parse_header(const std::string& text, const std::string& file) {
  if (auto problem = json_limit_problem(text))
    throw Error(fmt::format("{}: the header is not valid JSON: {} (at byte {} of the header)", file, problem->message,
                            problem->byte));
  std::vector<std::set<std::string>> seen;
  std::string duplicate;
  auto on_event = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) seen.emplace_back();
    if (event == E::object_end && !seen.empty()) seen.pop_back();
    if (event == E::key && !seen.empty() && !seen.back().insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, on_event);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: the header is not valid JSON: {}", file, json_parse_problem(e, text).reason));
  }
  if (!duplicate.empty())
    throw Error(fmt::format("{}: the header gives the key \"{}\" twice (the format forbids duplicates)", file, bounded_text(duplicate)));
  if (!header.is_object())
    throw Error(fmt::format("{}: the header is JSON but not an object {{name: {{dtype, shape, data_offsets}}}}",
                            file));
  return header;
}

// Offsets [begin, end) of every tensor must tile [0, buffer) exactly.
void check_tiling(std::vector<std::pair<uint64_t, uint64_t>> spans, const std::vector<std::string>& names,
                  uint64_t buffer, const std::string& file) {
  std::vector<size_t> order(spans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return spans[a] < spans[b]; });
  uint64_t at = 0;
  for (size_t i : order) {
    if (spans[i].first != at)
      throw Error(fmt::format("{}: tensor \"{}\" starts at byte {} of the buffer, expected {} ({}): the buffer must "
                              "be fully indexed", file, bounded_text(names[i]), spans[i].first, at,
                              spans[i].first > at ? "a hole before it" : "it overlaps the tensor before it"));
    at = spans[i].second;
  }
  if (at != buffer)
    throw Error(fmt::format("{}: the tensors index {} bytes of the buffer, the file holds {} after the header", file,
                            at, buffer));
}

// One header entry as a tensor (values converted from the buffer).
FileTensor read_entry(const std::string& name, const nlohmann::json& e, const unsigned char* buffer,
                      uint64_t buffer_bytes, const std::string& file, std::pair<uint64_t, uint64_t>& span) {
  const std::string where = fmt::format("{}: tensor \"{}\"", file, bounded_text(name));
  if (!e.is_object()) throw Error(where + ": expected {\"dtype\", \"shape\", \"data_offsets\"}, got " + bounded_dump(e));
  FileTensor t;
  t.name = name;
  if (!e.contains("dtype") || !e["dtype"].is_string()) throw Error(where + ": expected a string \"dtype\"");
  t.dtype = e["dtype"].get<std::string>();
  if (!e.contains("shape") || !e["shape"].is_array()) throw Error(where + ": expected \"shape\": [integers >= 0]");
  uint64_t count = 1;
  for (const auto& d : e["shape"]) {
    if (!d.is_number_unsigned()) throw Error(where + ": expected \"shape\": [integers >= 0], got " + bounded_dump(e["shape"]));
    const uint64_t n = d.get<uint64_t>();
    if (n != 0 && count > (uint64_t{1} << 40) / n) throw Error(where + ": shape " + bounded_dump(e["shape"]) + " is too large");
    count *= n;
    t.shape.push_back(static_cast<int64_t>(n));
  }
  const auto& off = e.contains("data_offsets") ? e["data_offsets"] : nlohmann::json();
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned() ||
      off[0].get<uint64_t>() > off[1].get<uint64_t>())
    throw Error(where + ": expected \"data_offsets\": [begin, end] with 0 <= begin <= end, got " + bounded_dump(off));
  span = {off[0].get<uint64_t>(), off[1].get<uint64_t>()};
  if (span.second > buffer_bytes)
    throw Error(fmt::format("{}: data_offsets [{}, {}] run past the buffer's {} bytes (the file is truncated)", where,
                            span.first, span.second, buffer_bytes));
  const size_t width = dtype_bytes(t.dtype);
  if (width == 0)
    throw Error(fmt::format("{}: dtype {} is not read (F32; F64, F16 and BF16 are converted to float32)", where,
                            bounded_text(t.dtype, 20)));
  if (span.second - span.first != count * width)
    throw Error(fmt::format("{}: data_offsets [{}, {}] hold {} bytes, shape {} of {} needs {}", where, span.first,
                            span.second, span.second - span.first, bounded_dump(e["shape"]), t.dtype, count * width));
  const StoredFloat format = t.dtype == "F32"   ? StoredFloat::kF32
                             : t.dtype == "F64" ? StoredFloat::kF64
                             : t.dtype == "F16" ? StoredFloat::kF16
                                                : StoredFloat::kBF16;
  decode_floats(buffer + span.first, static_cast<size_t>(count), format, false, t.values);
  return t;
}

}  // namespace

TensorFile parse_safetensors(const std::string& bytes, const std::string& file) {
  if (bytes.size() < 8)
    throw Error(fmt::format("{}: truncated: {} bytes, a safetensors file starts with an 8-byte header length", file,
                            bytes.size()));
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const uint64_t n = load_u64_le(p);
  if (n > kMaxHeaderBytes)
    throw Error(fmt::format("{}: the header length is {} bytes, more than the format's limit of {} (not a "
                            "safetensors file?)", file, n, kMaxHeaderBytes));
  if (n > bytes.size() - 8)
    throw Error(fmt::format("{}: truncated: the header length is {} bytes, the file holds {} after it", file, n,
                            bytes.size() - 8));
  const std::string text = bytes.substr(8, static_cast<size_t>(n));
  if (text.empty() || text[0] != '{')
    throw Error(fmt::format("{}: the header does not start with '{{' (not a safetensors file?)", file));
  const nlohmann::json header = parse_header(text, file);
  TensorFile out;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::vector<std::string> names;
  const uint64_t buffer_bytes = bytes.size() - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) throw Error(file + ": \"__metadata__\" must be an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) throw Error(file + ": \"__metadata__\" must be an object of strings");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    spans.emplace_back();
    out.tensors.push_back(read_entry(it.key(), it.value(), p + 8 + n, buffer_bytes, file, spans.back()));
    names.push_back(it.key());
  }
  check_tiling(spans, names, buffer_bytes, file);
  std::vector<size_t> order(out.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return spans[a] < spans[b]; });
  TensorFile sorted;
  sorted.metadata = std::move(out.metadata);
  for (size_t i : order) sorted.tensors.push_back(std::move(out.tensors[i]));
  return sorted;
}

TensorFile read_tensor_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(fmt::format("{}: cannot open the file: {}", path, std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw Error(path + ": is a folder, not a .safetensors or .npz file");
  if (!S_ISREG(st.st_mode)) throw Error(path + ": is not a regular file (a device, pipe or socket)");
  if (static_cast<uint64_t>(st.st_size) > kMaxTensorFileBytes)
    throw Error(fmt::format("{}: {} bytes, more than the {} GiB gradsweep reads from a tensor file", path, st.st_size,
                            kMaxTensorFileBytes >> 30));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the file: {}", path, std::strerror(errno)));
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (static_cast<size_t>(in.gcount()) != bytes.size())
    throw Error(fmt::format("{}: cannot read the file (read {} of {} bytes)", path, in.gcount(), bytes.size()));
  if (bytes.size() >= 4 && bytes.compare(0, 2, "PK") == 0 && (bytes[2] == 3 || bytes[2] == 5))
    return parse_npz(bytes, path);
  return parse_safetensors(bytes, path);
}

std::string safetensors_bytes(const std::vector<OutTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const OutTensor& t : tensors) {
    uint64_t count = 1;
    for (int64_t d : t.shape) count *= static_cast<uint64_t>(d);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {at, at + 4 * count}}};
    at += 4 * count;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + at);
  for (const OutTensor& t : tensors) {
    uint64_t count = 1;
    for (int64_t d : t.shape) count *= static_cast<uint64_t>(d);
    for (uint64_t i = 0; i < count; ++i) {
      uint32_t u = 0;
      std::memcpy(&u, t.values + i, 4);
      for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((u >> (8 * b)) & 0xff));
    }
  }
  return out;
}

}  // namespace gs
