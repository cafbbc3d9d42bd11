// The node cache of data_cache.h: slot storage of decoded samples per part, per-rank staging of a step's accesses,
// and the leader's in-order update between two loader barriers.
#include "sim/model/data_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/config/run_kinds.h"

namespace gs {

CachePolicy parse_cache_policy(const std::string& name) {
  if (name == "none") return CachePolicy::kNone;
  if (name == "lru") return CachePolicy::kLru;
  if (name == "static") return CachePolicy::kStatic;
  if (name == "partitioned") return CachePolicy::kPartitioned;
  throw Error(fmt::format("data.cache.policy: unknown policy \"{}\"; expected none, lru, static or partitioned", name));
}

int64_t cache_capacity_samples(const RunConfig& config, const Dataset& data) {
  const auto& c = config.data.cache;
  const int64_t n = data.train_size();
  if (parse_cache_policy(c.policy) == CachePolicy::kNone || n <= 0) return 0;
  int64_t cap = 0;
  if (c.capacity_bytes > 0) {
    cap = c.capacity_bytes / std::max<int64_t>(1, data.decoded_sample_bytes());
  } else {
    cap = static_cast<int64_t>(std::floor(c.capacity_fraction * static_cast<double>(n) + 1e-9));
  }
  return std::min(cap, n);
}

namespace {

// A block of slots: the node's shared cache (lru, static) or one rank's part (partitioned).
struct Part {
  int64_t capacity = 0, used = 0;
  std::vector<float> x, y;
  std::vector<int32_t> labels;
  std::vector<int64_t> slot_sample;
  std::vector<int64_t> prev, next;  // lru: doubly linked list over slots, head = most recently used
  int64_t head = -1, tail = -1;

  void unlink(int64_t s) {
    const int64_t p = prev[static_cast<size_t>(s)], n = next[static_cast<size_t>(s)];
    (p >= 0 ? next[static_cast<size_t>(p)] : head) = n;
    (n >= 0 ? prev[static_cast<size_t>(n)] : tail) = p;
  }
  void push_front(int64_t s) {
    prev[static_cast<size_t>(s)] = -1;
    next[static_cast<size_t>(s)] = head;
    if (head >= 0) prev[static_cast<size_t>(head)] = s;
    head = s;
    if (tail < 0) tail = s;
  }
};

// One access of a step by one rank: its position in the global batch, the sample, whether the cache served it
// (hit or peer), and its row in the rank's staging buffer when it was read from storage and may be admitted.
struct Access {
  int64_t pos;
  int64_t sample;
  bool served;
  int64_t row;
};

struct Stage {
  std::vector<Access> accesses;
  Batch rows;  // staged decoded samples (x, y / labels), rows.count used
};

void copy_row(const float* src_x, const float* src_y, const int32_t* src_label, int64_t in_dim, int64_t out_dim,
              bool classification, Batch& out, int64_t row) {
  std::memcpy(out.x.data() + row * in_dim, src_x, static_cast<size_t>(in_dim) * sizeof(float));
  if (classification) {
    out.labels[static_cast<size_t>(row)] = *src_label;
  } else if (out_dim > 0) {
    std::memcpy(out.y.data() + row * out_dim, src_y, static_cast<size_t>(out_dim) * sizeof(float));
  }
}

}  // namespace

struct DataCache::Node {
  int first_rank = 0, ranks = 0;
  std::vector<Part> parts;
  std::vector<int32_t> part_of;  // per training sample: the part holding it, -1 when not cached
  std::vector<int64_t> slot_of;  // per training sample: its slot in that part
  std::vector<Stage> stages;     // per rank of the node
  Barrier barrier;
  explicit Node(int parties) : barrier(parties) {}
};

DataCache::DataCache(const Dataset& data, const RunConfig& config, int ranks_per_node)
    : policy_(parse_cache_policy(config.data.cache.policy)),
      capacity_(cache_capacity_samples(config, data)),
      ranks_per_node_(std::max(1, ranks_per_node)),
      in_dim_(data.in_dim()),
      out_dim_(data.classification() ? 0 : data.out_dim()),
      classification_(data.classification()),
      global_batch_(step_shape(config).global_batch),
      ranks_(static_cast<int>(config.cluster.ranks)),
      batch_(static_cast<int>(config.data.batch_per_rank)) {
  const int64_t n = data.train_size();
  GS_EXPECT(n > 0, "data.cache: the dataset has no indexed training set (fashion_mnist and teacher have one)");
  for (int first = 0; first < ranks_; first += ranks_per_node_) {
    const int here = std::min(ranks_per_node_, ranks_ - first);
    auto node = std::make_unique<Node>(here);
    node->first_rank = first;
    node->ranks = here;
    node->part_of.assign(static_cast<size_t>(n), -1);
    node->slot_of.assign(static_cast<size_t>(n), -1);
    node->stages.resize(static_cast<size_t>(here));
    const int parts = policy_ == CachePolicy::kPartitioned ? here : 1;
    node->parts.resize(static_cast<size_t>(parts));
    for (int p = 0; p < parts; ++p)  // partitioned: capacity split as evenly as integers allow, lower ranks first
      node->parts[static_cast<size_t>(p)].capacity = capacity_ / parts + (p < capacity_ % parts ? 1 : 0);
    nodes_.push_back(std::move(node));
  }
}

DataCache::~DataCache() = default;

void DataCache::fill(const Dataset& data, const std::vector<int64_t>& idx, int64_t /*step*/, int64_t micro,
                     int rank, Batch& out, DataCounts& counts) {
  Node& nd = *nodes_[static_cast<size_t>(rank / ranks_per_node_)];
  const int local = rank - nd.first_rank;
  Stage& st = nd.stages[static_cast<size_t>(local)];
  const int own_part = policy_ == CachePolicy::kPartitioned ? local : 0;
  const Part& own = nd.parts[static_cast<size_t>(own_part)];
  const bool may_admit = policy_ == CachePolicy::kLru ? own.capacity > 0 : own.used < own.capacity;
  const int64_t decoded = data.decoded_sample_bytes();
  std::vector<double> peer_bytes(static_cast<size_t>(nd.ranks), 0.0);
  for (size_t s = 0; s < idx.size(); ++s) {
    const int64_t sample = idx[s];
    const auto row = static_cast<int64_t>(s);
    const int64_t pos = (micro * ranks_ + rank) * batch_ + row;
    const int32_t p = nd.part_of[static_cast<size_t>(sample)];
    if (p >= 0) {
      const Part& part = nd.parts[static_cast<size_t>(p)];
      const int64_t slot = nd.slot_of[static_cast<size_t>(sample)];
      copy_row(part.x.data() + slot * in_dim_, out_dim_ > 0 ? part.y.data() + slot * out_dim_ : nullptr,
               classification_ ? part.labels.data() + slot : nullptr, in_dim_, out_dim_, classification_, out, row);
      if (p == own_part) {
        ++counts.hits;
      } else {
        ++counts.peer_samples;
        peer_bytes[static_cast<size_t>(p)] += static_cast<double>(decoded);
      }
      if (policy_ == CachePolicy::kLru) st.accesses.push_back({pos, sample, true, -1});
      continue;
    }
    data.read_sample(sample, out, row);
    ++counts.storage_samples;
    counts.storage_bytes += static_cast<double>(data.stored_sample_bytes());
    if (!may_admit) continue;
    Batch& r = st.rows;
    const int64_t at = r.count++;
    r.x.resize(static_cast<size_t>(r.count * in_dim_));
    std::memcpy(r.x.data() + at * in_dim_, out.x.data() + row * in_dim_, static_cast<size_t>(in_dim_) * sizeof(float));
    if (classification_) {
      r.labels.push_back(out.labels[static_cast<size_t>(row)]);
    } else if (out_dim_ > 0) {
      r.y.insert(r.y.end(), out.y.begin() + row * out_dim_, out.y.begin() + (row + 1) * out_dim_);
    }
    st.accesses.push_back({pos, sample, false, at});
  }
  for (double b : peer_bytes) {
    if (b > 0) {
      counts.peer_bytes += b;
      ++counts.peer_transfers;
    }
  }
}

void DataCache::end_step(int rank, int64_t /*step*/) {
  Node& nd = *nodes_[static_cast<size_t>(rank / ranks_per_node_)];
  nd.barrier.arrive_and_wait();  // every loader of the node has loaded the step
  if (rank == nd.first_rank) {
    std::vector<std::pair<Access, int>> all;  // (access, local rank)
    for (int l = 0; l < nd.ranks; ++l)
      for (const Access& a : nd.stages[static_cast<size_t>(l)].accesses) all.emplace_back(a, l);
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first.pos < b.first.pos; });
    for (const auto& [a, l] : all) {
      const int part_index = policy_ == CachePolicy::kPartitioned ? l : 0;
      Part& part = nd.parts[static_cast<size_t>(part_index)];
      int32_t& held = nd.part_of[static_cast<size_t>(a.sample)];
      if (held >= 0) {  // a hit (or the same sample admitted earlier in this step): lru refreshes it
        if (policy_ == CachePolicy::kLru) {
          const int64_t slot = nd.slot_of[static_cast<size_t>(a.sample)];
          part.unlink(slot);
          part.push_front(slot);
        }
        continue;
      }
      if (a.row < 0) continue;
      int64_t slot = -1;
      if (part.used < part.capacity) {
        slot = part.used++;
        part.x.resize(static_cast<size_t>(part.used * in_dim_));
        part.y.resize(static_cast<size_t>(part.used * out_dim_));
        part.labels.resize(classification_ ? static_cast<size_t>(part.used) : 0);
        part.slot_sample.push_back(-1);
        part.prev.push_back(-1);
        part.next.push_back(-1);
      } else if (policy_ == CachePolicy::kLru && part.tail >= 0) {
        slot = part.tail;  // evict the least recently used
        part.unlink(slot);
        nd.part_of[static_cast<size_t>(part.slot_sample[static_cast<size_t>(slot)])] = -1;
      } else {
        continue;  // static and partitioned never evict
      }
      const Batch& src = nd.stages[static_cast<size_t>(l)].rows;
      std::memcpy(part.x.data() + slot * in_dim_, src.x.data() + a.row * in_dim_,
                  static_cast<size_t>(in_dim_) * sizeof(float));
      if (classification_) {
        part.labels[static_cast<size_t>(slot)] = src.labels[static_cast<size_t>(a.row)];
      } else if (out_dim_ > 0) {
        std::memcpy(part.y.data() + slot * out_dim_, src.y.data() + a.row * out_dim_,
                    static_cast<size_t>(out_dim_) * sizeof(float));
      }
      part.slot_sample[static_cast<size_t>(slot)] = a.sample;
      if (policy_ == CachePolicy::kLru) part.push_front(slot);
      held = part_index;
      nd.slot_of[static_cast<size_t>(a.sample)] = slot;
    }
    for (Stage& st : nd.stages) {
      st.accesses.clear();
      st.rows.count = 0;
      st.rows.x.clear();
      st.rows.y.clear();
      st.rows.labels.clear();
    }
  }
  nd.barrier.arrive_and_wait();  // the update is visible to every loader
}

void DataCache::abort() {
  for (auto& nd : nodes_) nd->barrier.abort();
}

int64_t DataCache::resident_samples(int rank) const {
  const Node& nd = *nodes_[static_cast<size_t>(rank / ranks_per_node_)];
  int64_t total = 0;
  for (const Part& p : nd.parts) total += p.used;
  return total;
}

}  // namespace gs
