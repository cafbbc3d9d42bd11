// `powersgd`: PowerSGD (Vogels et al., NeurIPS 2019, Algorithm 1) as PyTorch's powerSGD_hook computes it. Per bucket,
// every matrix M of the tensor table (rows = shape[0], cols = the rest) with (rows + cols) r < rows cols is sent as
// rank-r factors: Gram-Schmidt on Q (warm-started: the previous step's all-reduced Q, initially Philox normals
// identical on every rank; the hook orthogonalizes it too), P = M Q, all-reduce P, Gram-Schmidt on P, Q = M^T P,
// all-reduce Q, decoded sum = P Q^T. The Gram-Schmidt and the products follow the hook's float32 arithmetic bit for
// bit (kernels/compress.h: orthogonalize_columns, powersgd_p / _q / _decode). The hook's Q is the all-reduced mean
// and its M each rank's mean gradient, here the sums: with power-of-two rank and sample counts the two differ by
// exact powers of two, which the normalizations cancel (the epsilon is scaled to the sums' units). The other tensors
// (biases, rank-1 tensors, matrices too small to gain) are concatenated and all-reduced in fp32, as PyTorch's hook
// does. Before start_step every bucket is all-reduced dense. With error feedback, this rank's decoded message is
// P Q_r^T (Q_r = M_r^T P before the all-reduce), which sums over ranks to the decoded sum.
#include <algorithm>

#include "kernels/compress.h"
#include "kernels/nvtx.h"
#include "kernels/rng.h"
#include "sim/compress/compressor.h"
#include "sim/core/clock.h"
#include "sim/core/error.h"

namespace gs {
namespace {

// Philox counter of the initial Q of tensor t: (kCompress, kInitStepWord, t, index). No compressor draw uses this
// step word (it would be optimizer step 2^32 - 1).
constexpr uint32_t kInitStepWord = 0xffffffffu;

struct Matrix {
  size_t offset = 0;  // in the flat gradient
  size_t rows = 0, cols = 0;
  size_t tensor = 0;      // index in the model's tensor table
  std::vector<float> q;  // cols x r, the initial draw (host)
  FloatBuffer warm;      // cols x r, the warm start in the memory of the jobs (the initial draw uploaded at first use)
  // q's scale against powerSGD_hook's q: 1 for the initial draw, then the step's sample count S (a warm-started Q
  // is the sum over ranks of M^T P with M the rank's gradient sum; the hook's is the mean over ranks of its M, the
  // rank's mean gradient). The orthogonalization epsilon is scaled by it, so norm + eps is the hook's in its units.
  double q_scale = 1.0;
};

// The compressed matrices of the model with their initial Q (the same on every rank).
// A matrix is compressed iff (rows + cols) rank x min_rate < rows cols (PowerSGDState's min_compression_rate).
std::vector<Matrix> initial_matrices(const Model& model, size_t rank, double min_rate, uint64_t seed) {
  std::vector<Matrix> out;
  const auto& tensors = model.tensors();
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorInfo& ti = tensors[t];
    if (ti.shape.size() < 2 || ti.count == 0) continue;
    const size_t rows = static_cast<size_t>(ti.shape[0]);
    const size_t cols = ti.count / rows;
    if (static_cast<double>((rows + cols) * rank) * min_rate >= static_cast<double>(rows * cols))
      continue;  // not enough gain: sent uncompressed
    Matrix m;
    m.offset = ti.offset;
    m.rows = rows;
    m.cols = cols;
    m.tensor = t;
    m.q.resize(cols * rank);
    fill_normal(m.q.data(), m.q.size(), seed, Purpose::kCompress, kInitStepWord, static_cast<uint32_t>(t));
    out.push_back(std::move(m));
  }
  return out;
}

class PowerSgd final : public Compressor {
 public:
  PowerSgd(const CompressionConfig& c, const Model& model, uint64_t seed)
      : rank_(static_cast<size_t>(c.rank)), start_(c.start_step), eps_(c.orthogonalization_epsilon),
        matrices_(initial_matrices(model, rank_, c.min_compression_rate, seed)) {}
  WireCollective collective() const override { return WireCollective::kAllReduce; }

  // Every element operation through the job's memory (CompressOps' orthogonalization and products, ElementOps'
  // copies); the dense part and the factors in the reducer's payload buffer there.
  void reduce_bucket(const BucketJob& job) override {
    GS_EXPECT(job.space != nullptr, "powersgd needs the reducer's buffers (BucketJob::space)");
    CompressTally& t = *job.tally;
    ElementOps& ops = job.ops();
    CompressOps& cops = job.compress_ops();
    const int rk = job.rank;
    const size_t lo = job.offset, hi = job.offset + job.n;
    const double f = job.ranks > 1 ? 2.0 * (job.ranks - 1) / job.ranks : 0.0;  // ring all-reduce bytes per byte
    CompressSpan encode_p(ops, rk, t, &CompressTally::compress_s);
    NvtxPhases nvtx(NvtxName::kCompress);
    // The tensors of this bucket: compressed matrices, and everything else (copied to `dense`).
    std::vector<Matrix*> mats;
    std::vector<std::pair<size_t, size_t>> rest;  // [begin, end) in the flat gradient
    if (job.step >= start_) {
      size_t cur = lo;
      for (Matrix& m : matrices_) {
        if (m.offset < lo || m.offset >= hi) continue;
        mats.push_back(&m);
      }
      std::sort(mats.begin(), mats.end(), [](const Matrix* a, const Matrix* b) { return a->offset < b->offset; });
      for (Matrix* m : mats) {
        if (m->offset > cur) rest.emplace_back(cur, m->offset);
        cur = m->offset + m->rows * m->cols;
      }
      if (cur < hi) rest.emplace_back(cur, hi);
    } else {
      rest.emplace_back(lo, hi);
    }
    const float* p = job.p - lo;  // indexable by flat offset
    float* own = job.own_decoded - lo;
    float* sum = job.sum - lo;
    size_t dense_n = 0;
    for (auto [b, e] : rest) dense_n += e - b;
    size_t p_elems = 0, q_elems = 0;
    for (Matrix* m : mats) {
      p_elems += m->rows * rank_;
      q_elems += m->cols * rank_;
    }
    float* dense = CompressSpace::room(ops, rk, job.space->payload, dense_n + p_elems + q_elems);
    float* pbuf = dense + dense_n;
    float* qbuf = pbuf + p_elems;
    size_t d = 0;
    for (auto [b, e] : rest) {
      ops.copy(rk, dense + d, p + b, e - b);
      ops.copy(rk, own + b, p + b, e - b);
      d += e - b;
    }
    size_t po = 0;
    for (Matrix* m : mats) {
      if (m->warm.get() == nullptr) {
        m->warm = ops.allocate(rk, m->q.size());
        ops.upload(rk, m->warm.get(), m->q.data(), m->q.size());
      }
      cops.orthogonalize_columns(rk, m->warm.get(), m->cols, rank_, static_cast<float>(eps_ * m->q_scale));
      cops.powersgd_p(rk, pbuf + po, p + m->offset, m->warm.get(), m->rows, m->cols, rank_);
      po += m->rows * rank_;
    }
    encode_p.end();
    double t1 = now_s();
    nvtx.next(NvtxName::kCommunicate, 4 * static_cast<uint64_t>(dense_n + p_elems));
    if (dense_n > 0) job.comm->all_reduce_sum(rk, dense, dense_n);
    if (p_elems > 0) job.comm->all_reduce_sum(rk, pbuf, p_elems);
    if (dense_n > 0) t.calls.push_back({WireCollective::kAllReduce, 4.0 * static_cast<double>(dense_n)});
    if (p_elems > 0) t.calls.push_back({WireCollective::kAllReduce, 4.0 * static_cast<double>(p_elems)});
    t.communicate_s += now_s() - t1;
    nvtx.next(NvtxName::kCompress);
    CompressSpan encode_q(ops, rk, t, &CompressTally::compress_s);
    po = 0;
    size_t qo = 0;
    for (Matrix* m : mats) {
      float* pm = pbuf + po;
      float* qm = qbuf + qo;
      // P sums the ranks' M Q with M the rank's gradient sum over its S / N samples; the hook's M is their mean.
      cops.orthogonalize_columns(rk, pm, m->rows, rank_, static_cast<float>(eps_ * job.divisor / job.ranks));
      cops.powersgd_q(rk, qm, p + m->offset, pm, m->rows, m->cols, rank_);
      cops.powersgd_decode(rk, own + m->offset, pm, qm, m->rows, m->cols, rank_);  // this rank's message
      po += m->rows * rank_;
      qo += m->cols * rank_;
    }
    encode_q.end();
    double t3 = now_s();
    nvtx.next(NvtxName::kCommunicate, 4 * static_cast<uint64_t>(q_elems));
    if (q_elems > 0) job.comm->all_reduce_sum(rk, qbuf, q_elems);
    if (q_elems > 0) t.calls.push_back({WireCollective::kAllReduce, 4.0 * static_cast<double>(q_elems)});
    t.communicate_s += now_s() - t3;
    nvtx.next(NvtxName::kCompress);
    CompressSpan decode(ops, rk, t, &CompressTally::decompress_s);
    po = 0;
    qo = 0;
    for (Matrix* m : mats) {
      const float* pm = pbuf + po;
      const float* qm = qbuf + qo;
      cops.powersgd_decode(rk, sum + m->offset, pm, qm, m->rows, m->cols, rank_);
      ops.copy(rk, m->warm.get(), qm, m->cols * rank_);  // warm start
      m->q_scale = job.divisor;
      po += m->rows * rank_;
      qo += m->cols * rank_;
    }
    d = 0;
    for (auto [b, e] : rest) {
      ops.copy(rk, sum + b, dense + d, e - b);
      d += e - b;
    }
    decode.end();
    const uint64_t bytes = 4 * static_cast<uint64_t>(dense_n + p_elems + q_elems);
    t.payload_bytes += bytes;
    t.wire_bytes += static_cast<uint64_t>(f * static_cast<double>(bytes));
  }

 private:
  size_t rank_;
  int64_t start_;
  double eps_;  // compression.orthogonalization_epsilon, in the hook's units (mean gradients)
  std::vector<Matrix> matrices_;
};

std::unique_ptr<Compressor> make(const RunConfig& rc, const Model& m, int) {
  return std::make_unique<PowerSgd>(rc.compression, m, static_cast<uint64_t>(rc.training.seed));
}

// PowerSGD all-reduces its factors between the workers.
void powersgd_issues(const RunConfig& c, std::vector<ConfigIssue>& issues) {
  if (c.sync.kind == "parameter_server")
    issues.push_back({"compression.kind", "powersgd needs all-reduces of its factors between the workers, which a "
                                          "parameter server does not do: with sync.kind \"parameter_server\" use "
                                          "another compressor (e.g. topk)"});
}

}  // namespace

std::vector<PowerSgdInitialQ> powersgd_initial_q(const RunConfig& rc, const Model& m) {
  std::vector<PowerSgdInitialQ> out;
  const size_t r = static_cast<size_t>(rc.compression.rank);
  const uint64_t seed = static_cast<uint64_t>(rc.training.seed);
  for (Matrix& x : initial_matrices(m, r, rc.compression.min_compression_rate, seed))
    out.push_back({x.tensor, x.cols, r, std::move(x.q)});
  return out;
}

CompressorEntry powersgd_compressor() {
  return {"powersgd", "PowerSGD rank r per matrix: warm-started Q, Gram-Schmidt, two factor all-reduces", make,
          lossy_options({"compression.rank", "compression.start_step", "compression.min_compression_rate",
                         "compression.orthogonalization_epsilon"}),
          powersgd_issues, nullptr, true};
}

}  // namespace gs
