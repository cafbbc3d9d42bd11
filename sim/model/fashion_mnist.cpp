// The `fashion_mnist` dataset: the gzip IDX files (LeCun's format) read with zlib, decoded once per process into a
// thread-safe cache keyed by file (path, size, mtime), pixels scaled to [0, 1]. Another IDX image set (e.g. MNIST)
// works through data.path when its files carry the same names.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <string>

#include "sim/core/error.h"
#include "sim/model/dataset.h"

namespace gs {

namespace {

constexpr const char* kDebianPath = "/usr/share/datasets/fashion-mnist";
constexpr uint32_t kImagesMagic = 2051;  // 0x00000803: unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801: unsigned bytes, 1 dimension
constexpr int64_t kClasses = 10;

[[noreturn]] void fail(const std::string& message) { throw_error(__FILE__, __LINE__, "a valid IDX file", message); }

struct Images {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<float> pixels;  // count x (rows*cols), in [0, 1]
};

struct Labels {
  std::vector<int32_t> labels;  // count, in [0, kClasses)
};

// Reads exactly n bytes; returns how many were read (fewer at the end of the stream). Throws on a zlib error.
size_t read_bytes(gzFile f, const std::string& path, unsigned char* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    const auto want = static_cast<unsigned>(std::min<size_t>(n - done, size_t{1} << 30));
    const int got = gzread(f, out + done, want);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      fail(path + ": corrupt gzip data (" + (msg ? msg : "zlib error") + ")");
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

// One IDX file of unsigned bytes: checks the magic number, reads the big-endian dimensions and exactly
// prod(dims) bytes of data (no more, no less). Returns {dims, data}.
std::pair<std::vector<int64_t>, std::vector<unsigned char>> read_idx(const std::string& path, uint32_t magic,
                                                                    int ndims) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    fail(path + ": file not found (data.path names the folder of the IDX .gz files; \"\" means " + kDebianPath +
         ", Debian's dataset-fashion-mnist)");
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) fail(path + ": cannot open (" + std::strerror(errno) + ")");
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  gzbuffer(f, 1u << 20);

  unsigned char header[16];
  const size_t header_bytes = 4 + 4 * static_cast<size_t>(ndims);
  if (read_bytes(f, path, header, header_bytes) != header_bytes) fail(path + ": truncated IDX header");
  auto be32 = [&](size_t at) {
    return (uint32_t{header[at]} << 24) | (uint32_t{header[at + 1]} << 16) | (uint32_t{header[at + 2]} << 8) |
           uint32_t{header[at + 3]};
  };
  if (be32(0) != magic) {
    fail(path + ": bad magic number " + std::to_string(be32(0)) + " (expected " + std::to_string(magic) + ")");
  }
  std::vector<int64_t> dims;
  int64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    dims.push_back(be32(4 + 4 * static_cast<size_t>(d)));
    if (dims.back() <= 0) fail(path + ": dimension " + std::to_string(d) + " is 0");
    total *= dims.back();
    if (total > (int64_t{1} << 36)) fail(path + ": implausible dimensions in the IDX header");
  }
  std::vector<unsigned char> data(static_cast<size_t>(total));
  const size_t got = read_bytes(f, path, data.data(), data.size());
  if (got != data.size()) {
    fail(path + ": truncated: the header promises " + std::to_string(total) + " bytes of data, the file has " +
         std::to_string(got));
  }
  unsigned char extra = 0;
  if (read_bytes(f, path, &extra, 1) != 0) {
    fail(path + ": more data than the header's " + std::to_string(total) + " bytes");
  }
  return {std::move(dims), std::move(data)};
}

std::shared_ptr<const Images> decode_images(const std::string& path) {
  auto [dims, bytes] = read_idx(path, kImagesMagic, 3);
  auto images = std::make_shared<Images>();
  images->count = dims[0];
  images->rows = dims[1];
  images->cols = dims[2];
  images->pixels.resize(bytes.size());
  float* out = images->pixels.data();
  const unsigned char* in = bytes.data();
  const size_t n = bytes.size();
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]) / 255.0f;  // torchvision's ToTensor
  return images;
}

std::shared_ptr<const Labels> decode_labels(const std::string& path) {
  auto [dims, bytes] = read_idx(path, kLabelsMagic, 1);
  auto labels = std::make_shared<Labels>();
  labels->labels.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] >= kClasses) {
      fail(path + ": label " + std::to_string(bytes[i]) + " of item " + std::to_string(i) + " is outside 0.." +
           std::to_string(kClasses - 1));
    }
    labels->labels[i] = bytes[i];
  }
  return labels;
}

// Process-wide cache of decoded files. The key holds the file's size and modification time, so a file rewritten in
// place is decoded again. Each entry has its own lock: one file is decoded once even when ranks or runs ask together,
// and different files decode in parallel.
template <typename T>
std::shared_ptr<const T> cached(const std::string& path, std::shared_ptr<const T> (*decode)(const std::string&)) {
  struct Entry {
    std::mutex mutex;
    std::shared_ptr<const T> value;
  };
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<Entry>> entries;

  std::error_code ec;
  std::string key = path;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) {
    const auto mtime = std::filesystem::last_write_time(path, ec);
    key += "|" + std::to_string(size) + "|" + std::to_string(ec ? 0 : mtime.time_since_epoch().count());
  }
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = entries[key];
    if (!slot) slot = std::make_shared<Entry>();
    entry = slot;
  }
  std::lock_guard<std::mutex> lock(entry->mutex);
  if (!entry->value) entry->value = decode(path);  // a failure leaves it empty; the next call tries again
  return entry->value;
}

struct Split {
  std::shared_ptr<const Images> images;
  std::shared_ptr<const Labels> labels;
};

Split load_split(const std::string& folder, const std::string& prefix) {
  const std::string images_path = folder + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = folder + "/" + prefix + "-labels-idx1-ubyte.gz";
  Split s;
  s.images = cached<Images>(images_path, decode_images);
  s.labels = cached<Labels>(labels_path, decode_labels);
  if (static_cast<int64_t>(s.labels->labels.size()) != s.images->count) {
    fail(images_path + " has " + std::to_string(s.images->count) + " images but " + labels_path + " has " +
         std::to_string(s.labels->labels.size()) + " labels");
  }
  return s;
}

class FashionMnist : public Dataset {
 public:
  explicit FashionMnist(const RunConfig& config) : config_(config) {
    const std::string folder = config.data.path.empty() ? kDebianPath : config.data.path;
    // The two splits decode in parallel on first use.
    auto test_future = std::async(std::launch::async, [&] { return load_split(folder, "t10k"); });
    train_ = load_split(folder, "train");  // on a throw, the future's destructor waits for the test split
    const Split test = test_future.get();
    if (test.images->rows != train_.images->rows || test.images->cols != train_.images->cols) {
      fail(folder + ": test images are " + std::to_string(test.images->rows) + "x" +
           std::to_string(test.images->cols) + " but training images are " + std::to_string(train_.images->rows) +
           "x" + std::to_string(train_.images->cols));
    }
    in_dim_ = train_.images->rows * train_.images->cols;
    steps_per_epoch_ = indexed_steps_per_epoch(config_, train_.images->count);

    int64_t eval_count = test.images->count;
    if (config.data.eval_samples > 0) {
      GS_EXPECT(config.data.eval_samples <= eval_count,
                "data.eval_samples: " + std::to_string(config.data.eval_samples) + " exceeds the " +
                    std::to_string(eval_count) + " samples of the test split");
      eval_count = config.data.eval_samples;
    }
    eval_.rank = 0;
    eval_.count = eval_count;
    eval_.in_dim = in_dim_;
    eval_.out_dim = 0;
    eval_.x.assign(test.images->pixels.begin(), test.images->pixels.begin() + eval_count * in_dim_);
    eval_.labels.assign(test.labels->labels.begin(), test.labels->labels.begin() + eval_count);
  }

  int64_t in_dim() const override { return in_dim_; }
  int64_t out_dim() const override { return kClasses; }
  bool classification() const override { return true; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }

  void micro_batch(int64_t step, int64_t micro, int rank, Batch& out) const override {
    const std::vector<int64_t> idx = micro_batch_indices(config_, train_.images->count, step, micro, rank);
    const auto count = static_cast<int64_t>(idx.size());
    out.rank = rank;
    out.count = count;
    out.in_dim = in_dim_;
    out.out_dim = 0;
    out.x.resize(static_cast<size_t>(count * in_dim_));
    out.y.clear();
    out.labels.resize(static_cast<size_t>(count));
    for (int64_t s = 0; s < count; ++s) {
      const int64_t i = idx[static_cast<size_t>(s)];
      std::memcpy(out.x.data() + s * in_dim_, train_.images->pixels.data() + i * in_dim_,
                  static_cast<size_t>(in_dim_) * sizeof(float));
      out.labels[static_cast<size_t>(s)] = train_.labels->labels[static_cast<size_t>(i)];
    }
  }

  const Batch& eval_set() const override { return eval_; }

 private:
  RunConfig config_;
  Split train_;
  int64_t in_dim_ = 0;
  int64_t steps_per_epoch_ = 0;
  Batch eval_;
};

}  // namespace

std::unique_ptr<Dataset> make_fashion_mnist(const RunConfig& config) { return std::make_unique<FashionMnist>(config); }

}  // namespace gs
