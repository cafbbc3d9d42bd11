// Shape presets of transformer language models for timing-only runs (training.mode "timing"): the tensor table and
// per-layer FLOPs of GPT-2 small/XL and LLaMA-7B at model.sequence_length, no arithmetic and no parameter memory.
// A new preset is one row in kPresets.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/model/model.h"

namespace gs {
namespace {

struct PresetShape {
  const char* name;
  int64_t layers, d_model, heads, d_ff, vocab, max_seq;
  bool gpt2;  // GPT-2: learned positions, LayerNorm with bias, biased linears, GELU MLP, tied lm head.
              // LLaMA: RMSNorm, no biases, SwiGLU MLP (3 matrices), untied lm head.
};

// GPT-2: Radford et al. 2019, HF configs (n_embd 768/1600, n_layer 12/48, n_head 12/25, n_ctx 1024, vocab 50257).
// LLaMA-7B: Touvron et al. 2023 (dim 4096, 32 layers, 32 heads, FFN 11008, vocab 32000, context 2048).
// MPT (MosaicML llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml: d_model, n_layers, n_heads, expansion_ratio 4,
// vocab_size 50368, max_seq_len 2048; GPT-2's structure: learned positions, LayerNorm, biases, GELU, tied head).
constexpr PresetShape kPresets[] = {
    {"gpt2-small", 12, 768, 12, 3072, 50257, 1024, true},
    {"gpt2-xl", 48, 1600, 25, 6400, 50257, 1024, true},
    {"llama-7b", 32, 4096, 32, 11008, 32000, 2048, false},
    {"mpt-125m", 12, 768, 12, 3072, 50368, 2048, true},
    {"mpt-350m", 24, 1024, 16, 4096, 50368, 2048, true},
    {"mpt-760m", 24, 1536, 12, 6144, 50368, 2048, true},
    {"mpt-1b", 24, 2048, 16, 8192, 50368, 2048, true},
    {"mpt-3b", 32, 2560, 20, 10240, 50368, 2048, true},
    {"mpt-7b", 32, 4096, 32, 16384, 50368, 2048, true},
};

class TransformerPreset final : public Model {
 public:
  TransformerPreset(const PresetShape& s, int64_t seq) : s_(s), seq_(seq) {
    const int64_t d = s.d_model;
    size_t off = 0;
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
      size_t count = 1;
      for (int64_t x : shape) count *= static_cast<size_t>(x);
      tensors_.push_back({name, shape, off, count});
      off += count;
    };
    // Table order = forward order; backward (and DDP buckets) run in reverse.
    add("embed.tokens", {s.vocab, d});
    if (s.gpt2) add("embed.positions", {s.max_seq, d});
    const size_t embed_end = off;
    layers_.push_back({0, embed_end, 0.0, 0.0});
    for (int64_t l = 0; l < s.layers; ++l) {
      const size_t begin = off;
      const std::string p = fmt::format("block{}.", l);
      add(p + "norm1.weight", {d});
      if (s.gpt2) add(p + "norm1.bias", {d});
      add(p + "attn.qkv.weight", {3 * d, d});
      if (s.gpt2) add(p + "attn.qkv.bias", {3 * d});
      add(p + "attn.proj.weight", {d, d});
      if (s.gpt2) add(p + "attn.proj.bias", {d});
      add(p + "norm2.weight", {d});
      if (s.gpt2) add(p + "norm2.bias", {d});
      if (s.gpt2) {
        add(p + "mlp.fc.weight", {s.d_ff, d});
        add(p + "mlp.fc.bias", {s.d_ff});
        add(p + "mlp.proj.weight", {d, s.d_ff});
        add(p + "mlp.proj.bias", {d});
      } else {
        add(p + "mlp.gate.weight", {s.d_ff, d});
        add(p + "mlp.up.weight", {s.d_ff, d});
        add(p + "mlp.down.weight", {d, s.d_ff});
      }
      // Forward FLOPs per token: 2 per weight of the matrices, plus the attention logits QK^T and the mixing AV,
      // 2 x seq x d each (Hoffmann et al. 2022, appendix F; no causal halving, softmax ignored). Training is 3x
      // forward: about 6 x parameters + 12 x seq x d per layer and token.
      const double matrix = s.gpt2 ? 4.0 * d * d + 2.0 * d * s.d_ff : 4.0 * d * d + 3.0 * d * s.d_ff;
      const double flops_token = 2.0 * matrix + 4.0 * static_cast<double>(seq_) * d;
      // Activations per token of one block in 16-bit storage (Korthikanti et al. 2022): d (34 + 5 heads seq / d).
      const double act_token = static_cast<double>(d) * (34.0 + 5.0 * s.heads * static_cast<double>(seq_) / d);
      LayerCost lc{begin, off, flops_token * seq_, act_token * seq_, 12.0};
      // For the price (cost_model.h): the GEMMs by shape (rows = tokens), the fused (FlashAttention-style) causal
      // attention's executed FLOPs (half of QK^T + AV: the masked blocks are skipped), and the memory-bound traffic
      // per token in 16-bit elements (2 bytes): two norms (read d, write d each), two residual adds (read 2d, write
      // d), the q/k/v rearrangement for the attention kernel (read and write 3d), and the MLP's activation: GELU on
      // d_ff (read and write), or LLaMA's SwiGLU (read 2 d_ff, write d_ff) plus rotary on q and k (read and write 2d).
      const double sq = static_cast<double>(seq_), dd = static_cast<double>(d), ff = static_cast<double>(s.d_ff);
      lc.gemms = {{sq, 3.0 * dd, dd}, {sq, dd, dd}};
      if (s.gpt2) {
        lc.gemms.push_back({sq, ff, dd});
      } else {
        lc.gemms.push_back({sq, ff, dd});
        lc.gemms.push_back({sq, ff, dd});
      }
      lc.gemms.push_back({sq, dd, ff});
      lc.attention_flops_per_sample = 0.5 * 4.0 * sq * dd * sq;
      const double elems = 4.0 * dd + 6.0 * dd + 6.0 * dd + (s.gpt2 ? 2.0 * ff : 3.0 * ff + 4.0 * dd);
      lc.elementwise_bytes_per_sample = 2.0 * elems * sq;
      lc.checkpointed = true;
      layers_.push_back(lc);
    }
    const size_t head_begin = off;
    add("norm_f.weight", {d});
    if (s.gpt2) add("norm_f.bias", {d});
    if (!s.gpt2) add("lm_head.weight", {s.vocab, d});
    // The output projection onto the vocabulary: 2 d V per token (tied to embed.tokens in GPT-2). Its memory-bound
    // traffic is the loss: the 16-bit logits cast to fp32 (read 2V, write 4V) and log-softmax (read and write 4V),
    // 10 V bytes a token forward (backward twice: the softmax gradient and its cast back).
    LayerCost head{head_begin, off, 2.0 * d * s.vocab * seq_, 4.0 * static_cast<double>(s.vocab) * seq_, 3.0};
    head.gemms = {{static_cast<double>(seq_), static_cast<double>(s.vocab), static_cast<double>(d)}};
    head.elementwise_bytes_per_sample = 10.0 * static_cast<double>(s.vocab) * seq_;
    layers_.push_back(head);
  }

  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  bool classification() const override { return true; }
  void init_params(float*, uint64_t) const override { refuse(); }
  std::unique_ptr<Workspace> make_workspace(int64_t) const override { refuse(); }
  double forward(const float*, const Batch&, Workspace&, const PrecisionPolicy&) const override { refuse(); }
  void backward(const float*, const Batch&, Workspace&, float*, const PrecisionPolicy&) const override { refuse(); }
  EvalSums evaluate(const float*, const Batch&, Workspace&) const override { refuse(); }
  double forward_flops_per_sample() const override {
    double f = 0.0;
    for (const auto& l : layers_) f += l.forward_flops_per_sample;
    return f;
  }
  std::vector<LayerCost> layer_costs() const override { return layers_; }
  bool shape_only() const override { return true; }

  // Activation memory of a micro-batch of b samples of s tokens, e bytes per activation value (docs/memory.md has the
  // derivations). One block, per sample, counting what autograd keeps for the backward:
  //   GPT-2: s h (8e + 2) + 2e s f + a s^2 (2e + 1), which at e = 2 and f = 4h is Korthikanti et al. 2022
  //          ("Reducing Activation Recomputation in Large Transformer Models", arXiv 2205.05198, section 4.1)
  //          s h (34 + 5 a s / h): attention 11 s h + 5 a s^2 (QKV input, Q, K, V, softmax output, its dropout mask
  //          and output, the projection's input, the dropout mask), MLP 19 s h (input, GELU input and output, mask),
  //          two LayerNorm inputs 4 s h; dropout masks are 1 byte a value.
  //   LLaMA: 8e s h + 4e s f + e a s^2, the same count without dropout, with RMSNorm and the SwiGLU MLP (its input,
  //          the gate and up outputs, SiLU's output, their product): attention 5e s h + e a s^2, MLP e s h + 4e s f,
  //          norms 2e s h.
  // Outside the blocks (ours, same counting): the token ids and labels (int64, 16 s bytes), GPT-2's embedding dropout
  // mask (s h bytes), the final norm's and the LM head's inputs (2e s h), the logits (e s V) and their fp32
  // log-softmax (4 s V) kept for the loss; while the loss backward runs, the gradients of the log-softmax and of the
  // fp32 logits (8 s V) are live beside them. Full checkpointing (torch.utils.checkpoint on every block, Megatron-LM's
  // "full" recomputation; Korthikanti et al. Table 2: 2 s b h L at e = 2) keeps each block's input (e s h) and
  // recomputes one block at a time in the backward, so one block's activations are live beside the checkpoints.
  // Attention is counted as eager attention (the a s^2 softmax terms kept), not FlashAttention.
  ActivationMemory activation_memory(int64_t samples, double e, bool checkpointing) const override {
    const double b = static_cast<double>(samples), s = static_cast<double>(seq_), h = static_cast<double>(s_.d_model),
                 a = static_cast<double>(s_.heads), f = static_cast<double>(s_.d_ff),
                 V = static_cast<double>(s_.vocab), L = static_cast<double>(s_.layers);
    const double block = s_.gpt2 ? s * h * (8.0 * e + 2.0) + 2.0 * e * s * f + a * s * s * (2.0 * e + 1.0)
                                 : 8.0 * e * s * h + 4.0 * e * s * f + e * a * s * s;
    const double outside = 16.0 * s + (s_.gpt2 ? s * h : 0.0);
    const double head = 2.0 * e * s * h + (e + 4.0) * s * V;
    const double loss_grads = 8.0 * s * V;
    ActivationMemory m;
    m.per_block_bytes = b * block;
    m.blocks = s_.layers;
    if (!checkpointing) {
      m.stored_bytes = b * (L * block + outside + head);
      m.working_bytes = b * loss_grads;
    } else {
      // The head runs (and is freed) before the first block is recomputed.
      m.stored_bytes = b * (L * e * s * h + outside);
      m.working_bytes = b * std::max(head + loss_grads, block);
    }
    return m;
  }

 private:
  [[noreturn]] void refuse() const {
    throw Error(fmt::format("model.kind \"{}\" is a shape preset: it only runs with training.mode \"timing\" "
                            "(--timing-only)", s_.name));
  }
  PresetShape s_;
  int64_t seq_;
  std::vector<TensorInfo> tensors_;
  std::vector<LayerCost> layers_;
};

}  // namespace

std::unique_ptr<Model> make_transformer_preset(const RunConfig& config) {
  for (const PresetShape& s : kPresets) {
    if (config.model.kind != s.name) continue;
    int64_t seq = config.model.sequence_length > 0 ? config.model.sequence_length : s.max_seq;
    if (seq > s.max_seq)
      throw Error(fmt::format("model.sequence_length: {} has a context of {} tokens, got {}", s.name, s.max_seq, seq));
    return std::make_unique<TransformerPreset>(s, seq);
  }
  throw Error(fmt::format("model.kind: no transformer preset \"{}\"", config.model.kind));
}

}  // namespace gs
