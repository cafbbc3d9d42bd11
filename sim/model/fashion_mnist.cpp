// The `fashion_mnist` dataset: the gzip IDX files (LeCun's format, idx.h) decompressed once per process into a
// thread-safe backing store keyed by file (path, size, mtime); each read decodes a sample's pixels to [0, 1]. Another IDX image set (e.g. MNIST)
// works through data.path when its files carry the same names.
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
#include "sim/model/idx.h"

namespace gs {

namespace {

constexpr const char* kDebianPath = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kClasses = 10;

[[noreturn]] void fail(const std::string& message) { throw_error(__FILE__, __LINE__, "a valid IDX file", message); }

// The backing store: the decompressed IDX bytes, which stand in for storage (a sample is read from here and decoded
// for real on every read that the cache does not serve).
struct Images {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<unsigned char> bytes;  // count x (rows*cols) pixel bytes
};

struct Labels {
  std::vector<unsigned char> labels;  // count, in [0, kClasses)
};

// Pixel byte -> float: torchvision's ToTensor.
inline void decode_pixels(const unsigned char* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]) / 255.0f;
}

std::shared_ptr<const Images> load_images(const std::string& path) {
  IdxData idx = read_idx_file(path, kIdxImagesMagic, 3);
  auto images = std::make_shared<Images>();
  images->count = idx.dims[0];
  images->rows = idx.dims[1];
  images->cols = idx.dims[2];
  images->bytes = std::move(idx.data);
  return images;
}


std::shared_ptr<const Labels> load_labels(const std::string& path) {
  IdxData idx = read_idx_file(path, kIdxLabelsMagic, 1);
  check_idx_labels(idx, path, static_cast<int>(kClasses));
  auto labels = std::make_shared<Labels>();
  labels->labels = std::move(idx.data);
  return labels;
}

// Process-wide cache of read files. The key holds the file's size and modification time, so a file rewritten in
// place is read again. Each entry has its own lock: one file is read once even when ranks or runs ask together,
// and different files read in parallel.
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
  s.images = cached<Images>(images_path, load_images);
  s.labels = cached<Labels>(labels_path, load_labels);
  if (static_cast<int64_t>(s.labels->labels.size()) != s.images->count) {
    fail(images_path + ": byte offset 4: " + std::to_string(s.images->count) + " images, but " + labels_path +
         ": byte offset 4: " + std::to_string(s.labels->labels.size()) + " labels");
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
    eval_.x.resize(static_cast<size_t>(eval_count * in_dim_));
    decode_pixels(test.images->bytes.data(), eval_.x.data(), eval_count * in_dim_);
    eval_.labels.assign(test.labels->labels.begin(), test.labels->labels.begin() + eval_count);
  }

  int64_t in_dim() const override { return in_dim_; }
  int64_t out_dim() const override { return kClasses; }
  bool classification() const override { return true; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }

  void micro_batch(int64_t step, int64_t micro, int rank, Batch& out) const override {
    const std::vector<int64_t> idx = micro_batch_indices(config_, train_.images->count, step, micro, rank);
    shape_batch(out, static_cast<int64_t>(idx.size()), rank);
    for (size_t s = 0; s < idx.size(); ++s) read_sample(idx[s], out, static_cast<int64_t>(s));
  }

  int64_t train_size() const override { return train_.images->count; }
  int64_t stored_sample_bytes() const override { return in_dim_ + 1; }  // pixel bytes + the label byte
  void shape_batch(Batch& out, int64_t count, int rank) const override {
    out.rank = rank;
    out.count = count;
    out.in_dim = in_dim_;
    out.out_dim = 0;
    out.x.resize(static_cast<size_t>(count * in_dim_));
    out.y.clear();
    out.labels.resize(static_cast<size_t>(count));
  }
  void read_sample(int64_t i, Batch& out, int64_t row) const override {
    decode_pixels(train_.images->bytes.data() + i * in_dim_, out.x.data() + row * in_dim_, in_dim_);
    out.labels[static_cast<size_t>(row)] = train_.labels->labels[static_cast<size_t>(i)];
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
