// Model interface and registry. A model is immutable and shared by all rank threads; per-rank scratch lives in a
// Workspace. Parameters and gradients of a rank are one flat fp32 buffer described by a tensor table. A new model is
// one file implementing Model plus one line in kModels (model_registry.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sim/config/run_config.h"

namespace gs {

struct DenseStack;  // kernels/dense.h

// One tensor of the flat parameter buffer: elements [offset, offset + count) hold it row-major with `shape`.
struct TensorInfo {
  std::string name;              // e.g. "layer0.weight"
  std::vector<int64_t> shape;    // e.g. {out, in}
  size_t offset = 0;             // elements
  size_t count = 0;              // elements
  // Its name in the state_dict of the equivalent torch module (what torch.save(model.state_dict()) and safetensors'
  // save_file write, and what model.init.from and report.save_weights files hold); "" = `name`.
  std::string state_dict_name{};
  const std::string& file_name() const { return state_dict_name.empty() ? name : state_dict_name; }
};

// A micro-batch (or evaluation set) in host memory. Row-major; count samples.
struct Batch {
  int rank = 0;                  // the rank it belongs to (the quadratic model's f_r)
  int64_t count = 0;             // samples
  int64_t in_dim = 0;
  int64_t out_dim = 0;           // regression targets per sample (0 for classification)
  std::vector<float> x;          // count x in_dim
  std::vector<float> y;          // count x out_dim (regression / mse)
  std::vector<int32_t> labels;   // count (classification / cross_entropy)
};

// Precision modes (precision.mode; docs/design.md, section 2). Append only.
enum class PrecisionMode { kFp32, kTf32, kBf16Mixed, kFp16Mixed, kFp16Pure, kFp8Mixed };

// precision.mode's string <-> enum. Throws gs::Error naming precision.mode for an unknown name.
PrecisionMode parse_precision_mode(const std::string& name);
const char* precision_mode_name(PrecisionMode mode);

struct PrecisionModeInfo {
  PrecisionMode mode;
  const char* name;
  const char* doc;
};
// Every mode with its one-line description, in listing order.
const std::vector<PrecisionModeInfo>& precision_modes();

// Precision policy handed to forward and backward (sim/model/precision.cpp). fp32 (and tf32, which the host never
// runs) take the fp32 path untouched; the other modes emulate their formats (kernels/dense_mixed.h).
struct PrecisionPolicy {
  PrecisionMode mode = PrecisionMode::kFp32;
  float loss_scale = 1.0f;           // the loss scale of this step: backward computes the gradient of scale x loss
  int64_t amax_history_len = 1024;   // fp8_mixed: amax history per tensor
  bool emulated() const {
    return mode == PrecisionMode::kBf16Mixed || mode == PrecisionMode::kFp16Mixed || mode == PrecisionMode::kFp16Pure ||
           mode == PrecisionMode::kFp8Mixed;
  }
};

struct MixedSpec;  // kernels/dense_mixed.h
// The arithmetic of an emulated mode (kernels/dense_mixed.h), one mapping for the host model and both cuda paths:
// bf16 for bf16_mixed and fp8_mixed (its non-GEMM tensors), fp16 for fp16_mixed and fp16_pure, fp32 otherwise;
// fp8 GEMMs under fp8_mixed; fp16_pure's gradients held in fp16; the policy's loss scale and amax history length.
MixedSpec mixed_spec(const PrecisionPolicy& policy);

// The policy of a run's precision section (loss_scale starts at 1; the strategy's scaler sets it per step).
PrecisionPolicy precision_policy(const PrecisionConfig& precision);

// Bytes per parameter a rank holds and sends in a precision mode (report): the weights the model computes with,
// their gradients, the optimizer state (state_buffers per parameter: 0 plain SGD, 1 momentum, 2 Adam), the fp32
// master copy (mixed modes), and the gradient on the wire (its storage format, unless a compressor sets another).
struct BytesPerParam {
  double weights = 4, gradients = 4, optimizer_state = 0, master = 0, wire = 4;
  double held() const { return weights + gradients + optimizer_state + master; }
};
BytesPerParam bytes_per_param(PrecisionMode mode, int state_buffers);

// What the emulated arithmetic counted in a rank's backward passes (see MixedCounters in kernels/dense_mixed.h).
struct PrecisionCounters {
  uint64_t grad_values = 0;     // gradient values rounded to the mode's gradient format
  uint64_t grad_underflow = 0;  // of those, nonzero values that became zero
  uint64_t grad_nonfinite = 0;  // of those, values that were or became inf/NaN
};

// Where a backward announces its finished gradient (Workspace::grad_ready), the shape of PyTorch c10d's autograd
// hooks: backward calls layer_ready once per layer of the tensor table (one or more consecutive tensors, e.g. a dense
// layer's weight and bias), last layer first, as soon as nothing later in that backward writes elements [begin, end)
// of the gradient it adds into. Called on the rank's own thread, once per layer and backward (never per element).
class GradReady {
 public:
  virtual void layer_ready(size_t begin, size_t end) = 0;

 protected:
  ~GradReady() = default;
};

// Per-rank scratch of a model (activations of the last forward, etc.).
struct Workspace {
  virtual ~Workspace() = default;
  PrecisionCounters precision;  // cumulative since the workspace was made; the model adds, the rank loop reads
  GradReady* grad_ready = nullptr;  // set by the caller: backward announces each finished layer there (null: none)
};

// What a model's backward calls after finishing the gradient of elements [begin, end) (one layer).
inline void announce_layer(Workspace& ws, size_t begin, size_t end) {
  if (ws.grad_ready != nullptr) ws.grad_ready->layer_ready(begin, end);
}

// One forward GEMM of a layer: [rows_per_sample x samples, k] x [k, n] (backward: two GEMMs of the same FLOPs).
struct LayerGemm {
  double rows_per_sample = 0.0;  // e.g. the sequence length of a transformer
  double n = 0.0;
  double k = 0.0;
};

// One layer as the model declares it to the cost model (sim/cost/cost_model.h).
struct LayerCost {
  size_t param_begin = 0;   // its gradient's elements [param_begin, param_end) in the flat buffer
  size_t param_end = 0;
  double forward_flops_per_sample = 0.0;     // a multiply-add counts 2 (model FLOPs, as MFU counts them)
  double activation_bytes_per_sample = 0.0;  // activations read + written by its forward, per sample
  double kernels = 1.0;                      // kernel launches of its forward (backward: twice as many)
  // Optional, for a finer price (cost_model.h): the forward's GEMMs by shape, the fused attention's executed FLOPs
  // per sample, and its memory-bound traffic besides the GEMMs (norms, activations, residuals, casts) per sample.
  // With no GEMMs declared, forward_flops_per_sample is priced as GEMM work and activation_bytes_per_sample as
  // the memory-bound traffic.
  std::vector<LayerGemm> gemms{};
  double attention_flops_per_sample = 0.0;
  double elementwise_bytes_per_sample = 0.0;
  bool checkpointed = false;  // under training.activation_checkpointing its forward runs again in the backward
  // Whether its backward computes the gradient of its input. False for a first layer fed by the data (nothing
  // upstream needs it: kernels/dense.h and cuda_dense.cpp stop at layer 0's weight gradient, as autograd does for an
  // input without requires_grad): its backward is then the weight-gradient GEMMs alone, its memory-bound traffic and
  // launches once instead of twice.
  bool input_gradient = true;
};

// Activation memory of one micro-batch on a GPU (the GPU memory estimate, sim/app/memory.h), in bytes. The
// model's file has the formula (transformer_preset.cpp: Korthikanti et al. 2022; mlp.cpp: its dense buffers).
struct ActivationMemory {
  double stored_bytes = 0.0;     // what the forward keeps for the backward (with checkpointing: each block's input)
  double working_bytes = 0.0;    // live beside them at the backward's peak (gradients of the logits; with
                                 // checkpointing the recomputed block)
  double per_block_bytes = 0.0;  // one transformer block of the micro-batch without checkpointing (0: none)
  int64_t blocks = 0;            // transformer blocks (0: not a transformer)
  double total_bytes() const { return stored_bytes + working_bytes; }
};

struct EvalSums {
  double loss_sum = 0.0;   // sum of per-sample losses
  int64_t correct = 0;     // classification: samples whose argmax equals the label
  int64_t count = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  size_t num_params() const;
  virtual bool classification() const = 0;
  // Writes the initial parameters into params[0..num_params()); identical for every rank (scheme in the model file).
  virtual void init_params(float* params, uint64_t seed) const = 0;
  // Scratch for batches of up to max_batch samples.
  virtual std::unique_ptr<Workspace> make_workspace(int64_t max_batch) const = 0;
  // Returns the SUM over the batch of the per-sample losses; keeps what backward needs in ws.
  virtual double forward(const float* params, const Batch& batch, Workspace& ws, const PrecisionPolicy& p) const = 0;
  // After forward on the same batch: grad[0..num_params()) += gradient of that sum (accumulates; never clears).
  // Announces every layer to ws.grad_ready (announce_layer) as its gradient is final, last layer first, together
  // covering the whole table once.
  virtual void backward(const float* params, const Batch& batch, Workspace& ws, float* grad,
                        const PrecisionPolicy& p) const = 0;
  // Loss sum and correct count over batch (forward only).
  virtual EvalSums evaluate(const float* params, const Batch& batch, Workspace& ws) const = 0;
  // Forward FLOPs per sample (for throughput and the cost model).
  virtual double forward_flops_per_sample() const = 0;
  // The layers the cost model prices (forward FLOPs and activation bytes per sample). Default: one per tensor of the
  // table, forward_flops_per_sample() split by parameter count, no activation bytes.
  virtual std::vector<LayerCost> layer_costs() const;
  // True for shape presets: tensors and costs only, no arithmetic (training.mode "timing" only).
  virtual bool shape_only() const { return false; }
  // Activations of one micro-batch of `samples` on a GPU when each activation value takes element_bytes (2 for
  // 16-bit modes, 4 for fp32); checkpointing: training.activation_checkpointing (transformer presets). Default:
  // none (models whose activations are negligible: quadratic).
  virtual ActivationMemory activation_memory(int64_t samples, double element_bytes, bool checkpointing) const;
};

// A model whose arithmetic runs elsewhere (on a GPU, on another memory) with a host model's shape: the tensor table,
// initial values, classification, costs and activation memory are `host`'s; workspaces, forward, backward and
// evaluate are the derived class's (sim/backend/cuda_model.cpp; the tests' sealed model).
class HostShapedModel : public Model {
 public:
  explicit HostShapedModel(std::unique_ptr<Model> host) : host_(std::move(host)) {}
  const std::vector<TensorInfo>& tensors() const override { return host_->tensors(); }
  bool classification() const override { return host_->classification(); }
  void init_params(float* params, uint64_t seed) const override { host_->init_params(params, seed); }
  double forward_flops_per_sample() const override { return host_->forward_flops_per_sample(); }
  std::vector<LayerCost> layer_costs() const override { return host_->layer_costs(); }
  ActivationMemory activation_memory(int64_t samples, double element_bytes, bool checkpointing) const override {
    return host_->activation_memory(samples, element_bytes, checkpointing);
  }

 protected:
  const Model& host() const { return *host_; }

 private:
  std::unique_ptr<Model> host_;
};

struct ModelEntry {
  const char* name;
  const char* doc;
  std::unique_ptr<Model> (*make)(const RunConfig& config);
  // The fields (or sections) that apply under this kind: model.kind's choices, the "only applies when model.kind is
  // ..." rules and the kinds at the start of those fields' docs are derived from them (sim/validate/kinds.cpp).
  std::vector<std::string> options;
  KindIssues issues = nullptr;  // its cross-field rule beyond the options (sim/validate: validate_config)
};

// The registry table (model_registry.cpp), in listing order.
const std::vector<ModelEntry>& model_registry();
// Throws gs::Error for an unknown kind or bad model configuration.
std::unique_ptr<Model> make_model(const RunConfig& config);

// The stack of fully connected layers of an mlp or linear configuration (kernels/dense.h; the layers both the host
// model and the cuda rank loop run). Throws gs::Error naming model.layers / activation / loss (mlp.cpp).
DenseStack dense_stack_from_config(const ModelConfig& m);

// `inner` with its initial parameters read from a .safetensors or .npz file (model.init.from; init_from_file.cpp):
// init_params copies them and ignores the seed. The file is read and checked here, once: every tensor of inner's
// table by its file_name() with its shape, float32 after conversion, finite. Throws gs::Error "model.init.from:
// PATH: ..." naming each missing, misshapen, extra or non-finite tensor with both shapes (and the parsers' errors).
std::unique_ptr<Model> with_initial_file(std::unique_ptr<Model> inner, const std::string& path);

// Factories (one per model file).
std::unique_ptr<Model> make_mlp(const RunConfig& config);
std::unique_ptr<Model> make_linear(const RunConfig& config);
std::unique_ptr<Model> make_quadratic(const RunConfig& config);
std::unique_ptr<Model> make_transformer_preset(const RunConfig& config);  // gpt2-small, gpt2-xl, llama-7b

}  // namespace gs
