// Tests of the GPU memory estimate of the modeled node (sim/app/memory.h, Model::activation_memory): per-parameter
// model states against Hugging Face's published figures, the activation formulas against Korthikanti et al. 2022's
// per-layer breakdown and against what PyTorch's autograd saved for the same blocks (tools/torch_activation_memory.py,
// the values written below), every buffer term by hand, and the skip message's suggestions checked by the estimate.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "sim/config/run_config.h"
#include "sim/config/scenario.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/hardware_profile.h"
#include "sim/model/model.h"
#include "sim/app/memory.h"
#include "sim/validate/validate.h"

namespace gs {
namespace {

constexpr double kLlama7b = 6738415616.0;  // parameters (the preset's published count, test_cost_model.cpp)

RunConfig preset(const std::string& kind, const std::string& mode = "bf16_mixed", const std::string& opt = "adamw") {
  RunConfig c;
  c.model.kind = kind;
  c.data.kind = "none";
  c.data.batch_per_rank = 1;
  c.training.mode = "timing";
  c.training.optimizer.kind = opt;
  c.precision.mode = mode;
  c.cluster.hardware = "h100-sxm-8";
  return c;
}

GpuMemoryEstimate estimate(const RunConfig& c) { return estimate_gpu_memory(c, *make_model(c)); }

double states_per_param(const RunConfig& c) {
  const GpuMemoryEstimate e = estimate(c);
  return static_cast<double>(e.model_states_bytes()) / static_cast<double>(make_model(c)->num_params());
}

// Hugging Face Transformers, "model memory anatomy": weights 4 bytes (fp32) or 6 (mixed precision: the fp32 copy and
// the 16-bit one), gradients 4 ("always kept in fp32"), AdamW 8, SGD with momentum 4. fp16_pure holds everything in
// fp16: 2 + 2 + 2 x 2 with Adam.
TEST(GpuMemory, ModelStatesPerParameterAreThePublishedFigures) {
  EXPECT_DOUBLE_EQ(states_per_param(preset("llama-7b", "fp32", "adamw")), 16.0);
  EXPECT_DOUBLE_EQ(states_per_param(preset("llama-7b", "bf16_mixed", "adamw")), 18.0);
  EXPECT_DOUBLE_EQ(states_per_param(preset("llama-7b", "fp16_mixed", "adam")), 18.0);
  RunConfig sgd = preset("llama-7b", "fp32", "sgd");
  sgd.training.optimizer.momentum = 0.9;
  EXPECT_DOUBLE_EQ(states_per_param(sgd), 12.0);
  sgd.precision.mode = "bf16_mixed";
  EXPECT_DOUBLE_EQ(states_per_param(sgd), 14.0);
  sgd.training.optimizer.momentum = 0.0;  // plain SGD keeps no state
  EXPECT_DOUBLE_EQ(states_per_param(sgd), 10.0);
  EXPECT_DOUBLE_EQ(states_per_param(preset("llama-7b", "fp16_pure", "adamw")), 8.0);
}

// The issue's example: LLaMA-7B, bf16 weights, fp32 master weights and gradients, AdamW: 18 bytes per parameter,
// 121.3 GB, on an 80 GB GPU (72 GiB usable at the profile's 0.9): skipped, the states named, no batch suggested.
TEST(GpuMemory, Llama7bWithAdamWDoesNotFitAnH100AndTheMessageSaysWhy) {
  RunConfig c = preset("llama-7b");
  c.cluster.ranks = 8;
  const GpuMemoryEstimate e = estimate(c);
  EXPECT_EQ(e.model_states_bytes(), static_cast<int64_t>(18 * kLlama7b));
  EXPECT_EQ(e.capacity_bytes, int64_t{80} << 30);
  EXPECT_EQ(e.usable_bytes, static_cast<int64_t>(0.9 * 80 * 1073741824.0));
  EXPECT_FALSE(e.fits());
  const std::string m = gpu_memory_skip_reason(c, *make_model(c));
  for (const char* want : {"hardware profile \"h100-sxm-8\"", "NVIDIA H100 SXM5 80GB", "113.0 GiB (121.3 GB, 18.0 bytes "
                           "per parameter)", "72.0 GiB is usable", "ZeRO / FSDP"})
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  // Not on an H200 either (126.9 GiB usable: states 113.0 + DDP buckets 25.1 GiB): no profile suggested.
  EXPECT_EQ(m.find("as configured it fits"), std::string::npos) << m;
}

// LLaMA-7B's shape (Touvron et al. 2023): L = 32 blocks, h = 4096, a = 32 heads, f = 11008, V = 32000, s = 2048.
// One micro-batch's activations at e = 2 bytes, b = 1, from docs/memory.md: per block 8e s h + 4e s f + e a s^2; outside
// the blocks the token ids and labels (16 s), the final norm's and the head's inputs (2e s h), the logits (e s V),
// their fp32 log-softmax (4 s V) and its backward's two fp32 gradients (8 s V).
double llama7b_activations_bytes() {
  const double e = 2, s = 2048, h = 4096, a = 32, f = 11008, V = 32000, L = 32;
  return L * (8 * e * s * h + 4 * e * s * f + e * a * s * s) + 16 * s + 2 * e * s * h + e * s * V + 4 * s * V +
         8 * s * V;
}

// The skip message names the smallest ZeRO stage that fits, from the ZeRO paper's model states (Rajbhandari et al.
// 2020, section 5.1: 2 + 2 + K bytes per parameter, stage 1 shards the K, stage 2 also the gradient's, stage 3 all;
// here the gradient is fp32, 4 bytes, and K = 12 for AdamW's master weights and moments) per rank of N = 8 with the
// partition ceil(n / 8), plus the activations and the buffers docs/memory.md names (stage 1: DDP's bucket copy of the
// fp32 gradient, 4n; stage 2: one 25 MiB reduce bucket), against 72 GiB usable.
TEST(GpuMemory, SkipMessageNamesTheSmallestZeroStageThatFits) {
  RunConfig c = preset("llama-7b");
  c.cluster.ranks = 8;
  const double n = kLlama7b, part = std::ceil(n / 8), usable = 0.9 * 80 * 1073741824.0;
  const double act = llama7b_activations_bytes();
  EXPECT_NEAR(static_cast<double>(estimate(c).activations_bytes), act, 1e-6 * act);
  const double stage1 = 2 * n + 4 * n + 12 * part + 4 * n + act;  // 97.1 GB: does not fit
  const double stage2 = 2 * n + 4 * part + 12 * part + 25.0 * 1048576 + act;  // 46.6 GB: fits
  ASSERT_GT(stage1, usable);
  ASSERT_LT(stage2, usable);
  std::string m = gpu_memory_skip_reason(c, *make_model(c));
  EXPECT_NE(m.find(fmt::format("the smallest sync.stage that fits is 2 ({:.1f} GiB per rank)", stage2 / 1073741824.0)),
            std::string::npos)
      << m;
  // The same run as ZeRO stage 1: the stages above it.
  c.sync.kind = "zero";
  c.sync.stage = 1;
  m = gpu_memory_skip_reason(c, *make_model(c));
  EXPECT_NE(m.find("above this run's stage) the smallest sync.stage that fits is 2"), std::string::npos) << m;
  // It already shards: the message asks for more sharding than its stage, not for ZeRO.
  EXPECT_NE(m.find("without sharding more of them than sync.stage 1 does"), std::string::npos) << m;
  EXPECT_EQ(m.find("without sharding the states over the ranks"), std::string::npos) << m;
  // On 2 ranks even stage 3 does not fit: 18 bytes x ceil(n / 2) of states and the activations alone exceed 72 GiB.
  c.sync.kind = "allreduce";
  c.cluster.ranks = 2;
  ASSERT_GT(18 * std::ceil(n / 2) + act, usable);
  m = gpu_memory_skip_reason(c, *make_model(c));
  EXPECT_NE(m.find("no ZeRO stage fits either (sync.kind \"zero\", sync.stage 3: "), std::string::npos) << m;
  EXPECT_EQ(m.find("smallest sync.stage"), std::string::npos) << m;
}

// One block's activations at e = 2 are Korthikanti et al. 2022's s b h (34 + 5 a s / h) (section 4.1; GPT-2 has
// f = 4h and dropout). At e = 4 their breakdown's 2-byte terms double and the 1-byte dropout masks stay:
// attention 10 sbh + 4 as^2 b (2-byte) + sbh + as^2 b (masks) -> 21 sbh + 9 as^2 b; MLP 18 sbh + sbh -> 37 sbh;
// LayerNorms 8 sbh; total 66 sbh + 9 as^2 b.
TEST(GpuMemory, Gpt2BlockActivationsFollowKorthikanti) {
  for (const auto& [kind, h, a] : {std::tuple<const char*, double, double>{"gpt2-small", 768, 12},
                                   std::tuple<const char*, double, double>{"gpt2-xl", 1600, 25}}) {
    RunConfig c = preset(kind);
    const double s = 1024, b = 3;
    c.data.batch_per_rank = 3;
    EXPECT_DOUBLE_EQ(estimate(c).activations.per_block_bytes, s * b * h * (34.0 + 5.0 * a * s / h)) << kind;
    c.precision.mode = "fp32";
    EXPECT_DOUBLE_EQ(estimate(c).activations.per_block_bytes, 66.0 * s * b * h + 9.0 * a * s * s * b) << kind;
  }
}

// What PyTorch 1.13's autograd saved for one eager block (tools/torch_activation_memory.py, less the norms' per-token
// statistics it prints apart), at the presets' shapes:
//   --arch gpt2 --hidden 768 --heads 12 --ffn 3072 --seq 64 --batch 2 --dtype bf16 -> 3,833,856 bytes
//   --arch gpt2 --hidden 768 --heads 12 --ffn 3072 --seq 64 --batch 1 --dtype fp32 -> 3,686,400 bytes
//   --arch llama --hidden 4096 --heads 32 --ffn 11008 --seq 16 --batch 1 --dtype fp32 -> 4,947,968 bytes
TEST(GpuMemory, BlockActivationsAreWhatPyTorchSaves) {
  RunConfig c = preset("gpt2-small");
  c.model.sequence_length = 64;
  c.data.batch_per_rank = 2;
  EXPECT_DOUBLE_EQ(estimate(c).activations.per_block_bytes, 3833856.0);
  c.data.batch_per_rank = 1;
  c.precision.mode = "fp32";
  EXPECT_DOUBLE_EQ(estimate(c).activations.per_block_bytes, 3686400.0);
  RunConfig l = preset("llama-7b", "fp32");
  l.model.sequence_length = 16;
  EXPECT_DOUBLE_EQ(estimate(l).activations.per_block_bytes, 4947968.0);
}

// Full checkpointing keeps each block's input: 2 s b h L at e = 2 (Korthikanti et al. Table 2), plus the token ids
// and labels (16 s b); one block is recomputed at a time, so the peak holds, beside them, the larger of one block's
// activations and the head's with the loss gradients (LLaMA-7B, s = 2048, per sample: the block 583 MB; the head's
// inputs 4 s h, logits 2 s V, their fp32 log-softmax 4 s V and the loss gradients 8 s V: 951 MB).
TEST(GpuMemory, CheckpointingKeepsBlockInputsAndOneBlock) {
  RunConfig c = preset("llama-7b");
  c.data.batch_per_rank = 2;
  const GpuMemoryEstimate full = estimate(c);
  c.training.activation_checkpointing = true;
  const GpuMemoryEstimate ck = estimate(c);
  const double s = 2048, h = 4096, L = 32, b = 2;
  EXPECT_DOUBLE_EQ(ck.activations.stored_bytes, 2.0 * s * b * h * L + 16.0 * s * b);
  const double V = 32000, head = 4.0 * s * h + 14.0 * s * V;
  EXPECT_GT(b * head, full.activations.per_block_bytes);
  EXPECT_DOUBLE_EQ(ck.activations.working_bytes, b * head);
  EXPECT_EQ(ck.model_states_bytes(), full.model_states_bytes());
  EXPECT_LT(ck.activations_bytes * 10, full.activations_bytes);
}

// The suggestion is checked by the estimate itself: the largest micro-batch named fits, one more does not; with
// checkpointing a larger one fits, named the same way (GPT-2 XL, 8 ranks: 32.3 GiB of states and DDP buckets, about
// 9 GiB of activations per sample, 0.9 GiB with checkpointing).
TEST(GpuMemory, TheLargestBatchNamedFitsAndOneMoreDoesNot) {
  RunConfig c = preset("gpt2-xl");
  c.cluster.ranks = 8;
  c.data.batch_per_rank = 64;
  auto model = make_model(c);
  const std::string m = gpu_memory_skip_reason(c, *model);
  auto number_after = [&](const std::string& key) -> int64_t {
    const size_t at = m.find(key);
    return at == std::string::npos ? -1 : std::stoll(m.substr(at + key.size()));
  };
  const int64_t b = number_after("the largest data.batch_per_rank that fits is ");
  ASSERT_GT(b, 0) << m;
  c.data.batch_per_rank = b;
  EXPECT_TRUE(estimate_gpu_memory(c, *model).fits());
  c.data.batch_per_rank = b + 1;
  EXPECT_FALSE(estimate_gpu_memory(c, *model).fits());
  const int64_t bc = number_after("with training.activation_checkpointing true the largest that fits is ");
  ASSERT_GT(bc, b) << m;
  c.training.activation_checkpointing = true;
  c.data.batch_per_rank = bc;
  EXPECT_TRUE(estimate_gpu_memory(c, *model).fits());
  c.data.batch_per_rank = bc + 1;
  EXPECT_FALSE(estimate_gpu_memory(c, *model).fits());
  // A micro-batch that checkpointing lets fit whole is said so.
  c.training.activation_checkpointing = false;
  c.data.batch_per_rank = 8;
  EXPECT_NE(gpu_memory_skip_reason(c, *model).find("; with training.activation_checkpointing true it fits as "
                                                   "configured"), std::string::npos);
}

// LLaMA-7B in fp32 with plain SGD on one rank: 8 bytes per parameter (50.2 GiB) and one sample's fp32 activations
// (about 35 GiB) exceed 72 GiB, so no micro-batch fits without checkpointing; with it, up to some batch does. One
// sample fits an H200 (126.9 GiB usable) as configured, and the message names both H200 profiles.
TEST(GpuMemory, NoBatchWithoutCheckpointingAndTheProfilesThatHoldIt) {
  RunConfig c = preset("llama-7b", "fp32", "sgd");
  c.data.batch_per_rank = 16;
  auto model = make_model(c);
  const std::string m = gpu_memory_skip_reason(c, *model);
  const std::string key = "no data.batch_per_rank fits without checkpointing; with training.activation_checkpointing "
                          "true the largest that fits is ";
  const size_t at = m.find(key);
  ASSERT_NE(at, std::string::npos) << m;
  const int64_t b = std::stoll(m.substr(at + key.size()));
  c.training.activation_checkpointing = true;
  c.data.batch_per_rank = b;
  EXPECT_TRUE(estimate_gpu_memory(c, *model).fits());
  c.data.batch_per_rank = b + 1;
  EXPECT_FALSE(estimate_gpu_memory(c, *model).fits());
  c.training.activation_checkpointing = false;
  c.data.batch_per_rank = 1;
  const std::string one = gpu_memory_skip_reason(c, *model);
  EXPECT_NE(one.find("no data.batch_per_rank fits without checkpointing; with training.activation_checkpointing true "
                     "it fits as configured; as configured it fits one GPU of h200-1, h200-sxm-2, h200-sxm-4, "
                     "h200-sxm-8"),
            std::string::npos) << one;
}

// Buffers by hand for an MLP 784-256-10 (n = 784 x 256 + 256 + 256 x 10 + 10 = 203,530 parameters).
TEST(GpuMemory, BufferTermsByHand) {
  RunConfig c;
  c.model.layers = {784, 256, 10};
  c.cluster.ranks = 4;
  c.data.batch_per_rank = 32;
  const double n = 203530;
  GpuMemoryEstimate e = estimate(c);
  EXPECT_EQ(e.communication_bytes, static_cast<int64_t>(4 * n));  // DDP's bucket copy of the fp32 gradient
  EXPECT_EQ(e.compression_bytes + e.error_feedback_bytes, 0);
  // Activations (fp32): pre-activations 256 + 10 and the hidden activation 256 per sample, the fp32 input (784) and
  // an int64 label; working: two gradient buffers of the widest layer (256).
  EXPECT_DOUBLE_EQ(e.activations.stored_bytes, 32.0 * ((256 + 256 + 10) * 4.0 + 784 * 4.0 + 8.0));
  EXPECT_DOUBLE_EQ(e.activations.working_bytes, 32.0 * 2 * 256 * 4.0);
  c.cluster.ranks = 1;
  EXPECT_EQ(estimate(c).communication_bytes, 0);  // nothing to communicate
  c.cluster.ranks = 4;
  c.sync.kind = "independent";
  EXPECT_EQ(estimate(c).communication_bytes, 0);
  c.sync.kind = "allreduce";
  c.compression.kind = "fp16";
  c.compression.error_feedback = "gradient";
  e = estimate(c);
  EXPECT_EQ(e.compression_bytes, static_cast<int64_t>(2 * n));  // the fp16 copy
  EXPECT_EQ(e.error_feedback_bytes, static_cast<int64_t>(4 * n));
  c.compression.kind = "dgc";
  c.compression.error_feedback = "none";
  EXPECT_EQ(estimate(c).error_feedback_bytes, static_cast<int64_t>(8 * n));  // velocity and accumulation
  // Error-feedback placements on top-k with SGD momentum 0.9: gradient keeps e (4 n) beside SGD's momentum buffer
  // (4 n); momentum correction keeps each rank's velocity u and residual v (8 n) and the optimizer no buffer; ef21
  // keeps the rank's h and the mean G (8 n) beside SGD's buffer.
  c.compression.kind = "topk";
  c.training.optimizer.momentum = 0.9;
  c.compression.error_feedback = "gradient";
  e = estimate(c);
  EXPECT_EQ(e.error_feedback_bytes, static_cast<int64_t>(4 * n));
  EXPECT_EQ(e.optimizer_bytes, static_cast<int64_t>(4 * n));
  c.compression.error_feedback = "momentum";
  e = estimate(c);
  EXPECT_EQ(e.error_feedback_bytes, static_cast<int64_t>(8 * n));
  EXPECT_EQ(e.optimizer_bytes, 0);
  c.compression.error_feedback = "ef21";
  e = estimate(c);
  EXPECT_EQ(e.error_feedback_bytes, static_cast<int64_t>(8 * n));
  EXPECT_EQ(e.optimizer_bytes, static_cast<int64_t>(4 * n));
  c.training.optimizer.momentum = 0.0;
  c.compression.error_feedback = "none";
  // Top-k at ratio 0.01 over one bucket (the whole 814 kB gradient is under the 1 MiB first bucket): round(2035.3)
  // values of 8 bytes, own payload and the 4 ranks' gathered ones.
  c.compression.kind = "topk";
  c.compression.ratio = 0.01;
  EXPECT_EQ(estimate(c).compression_bytes, (1 + 4) * 2035 * 8);
  // PowerSGD rank 4: 256 x 784 -> P 256 x 4, Q 784 x 4 and the warm-start Q 784 x 4; 10 x 256 ((10 + 256) 4 = 1064 <
  // 2560) -> P 10 x 4, Q 256 x 4, warm Q 256 x 4; the biases (266) sent dense; 4 bytes each.
  c.compression.kind = "powersgd";
  c.compression.rank = 4;
  EXPECT_EQ(estimate(c).compression_bytes, 4 * (256 * 4 + 784 * 4 + 784 * 4 + 10 * 4 + 256 * 4 + 256 * 4 + 266));
}

// The parameter server: workers hold no optimizer state; a co-located shard holds its part of the parameters and the
// state; a dedicated server holds it elsewhere.
TEST(GpuMemory, ParameterServerShardsSitOnTheRanksThatHostThem) {
  RunConfig c;
  c.model.layers = {784, 256, 10};
  c.cluster.ranks = 4;
  c.sync.kind = "parameter_server";
  c.training.optimizer.kind = "adam";
  const double n = 203530;
  GpuMemoryEstimate e = estimate(c);
  EXPECT_EQ(e.weights_bytes, static_cast<int64_t>(4 * n));  // the pulled fp32 parameters
  EXPECT_EQ(e.master_weights_bytes, static_cast<int64_t>(4 * std::ceil(n / 4)));
  EXPECT_EQ(e.optimizer_bytes, static_cast<int64_t>(8 * std::ceil(n / 4)));
  c.sync.dedicated = true;
  e = estimate(c);
  EXPECT_EQ(e.master_weights_bytes + e.optimizer_bytes, 0);
  c.sync.dedicated = false;
  c.precision.mode = "bf16_mixed";
  EXPECT_EQ(estimate(c).weights_bytes, static_cast<int64_t>(6 * n));  // fp32 pulled and the bf16 copy
}

// The datasheet capacities: 80 GB A100 and H100, 141 GB H200; every profile carries a usable fraction in (0, 1].
TEST(GpuMemory, ProfilesCarryTheDatasheetCapacity) {
  EXPECT_EQ(load_hardware_profile("a100-sxm-8")->memory_capacity_GiB, 80.0);
  EXPECT_EQ(load_hardware_profile("h100-sxm-8")->memory_capacity_GiB, 80.0);
  EXPECT_EQ(load_hardware_profile("h100-pcie-8")->memory_capacity_GiB, 80.0);
  EXPECT_EQ(load_hardware_profile("h200-sxm-8")->memory_capacity_GiB, 141.0);
  for (const std::string& name : hardware_profile_names()) {
    const auto hw = load_hardware_profile(name);
    EXPECT_GT(hw->memory_capacity_GiB, 0.0) << name;
    EXPECT_GT(hw->memory_usable_fraction, 0.0) << name;
    EXPECT_LE(hw->memory_usable_fraction, 1.0) << name;
  }
}

// Checkpointing on the modeled clock: the backward runs every block's forward once more; the head (not
// checkpointed) is not recomputed, and the forward is unchanged.
TEST(GpuMemory, CheckpointingAddsTheBlocksForwardToTheBackward) {
  RunConfig c = preset("gpt2-small");
  auto model = make_model(c);
  CostModel plain(c, *model);
  c.training.activation_checkpointing = true;
  CostModel ck(c, *model);
  StepCost a = plain.make_step_cost(), b = ck.make_step_cost();
  plain.add_micro_batch(a, 4, true);
  ck.add_micro_batch(b, 4, true);
  const auto fwd = static_cast<size_t>(Phase::kForward), bwd = static_cast<size_t>(Phase::kBackward);
  EXPECT_DOUBLE_EQ(a.compute_s[fwd], b.compute_s[fwd]);
  // The blocks' forward alone: price a cost model whose layers are the blocks only.
  std::vector<LayerCost> blocks;
  for (const LayerCost& l : model->layer_costs())
    if (l.checkpointed) blocks.push_back(l);
  ASSERT_EQ(blocks.size(), 12u);
  CostModel only(load_hardware_profile("h100-sxm-8"), 1, blocks, {}, 1, Precision::kBf16);
  StepCost o = only.make_step_cost();
  only.add_micro_batch(o, 4, true);
  EXPECT_NEAR(b.compute_s[bwd] - a.compute_s[bwd], o.compute_s[fwd], 1e-12 * o.compute_s[fwd]);
  EXPECT_LT(o.compute_s[fwd], a.compute_s[fwd]);  // the head's share is not recomputed
}

// The new fields' rules, each naming its JSON path: checkpointing is a transformer preset's; a timeline draws at most
// 50 steps (also when given as epochs: 2 epochs of 4096 samples in global batches of 64 are 128 steps).
TEST(GpuMemory, CheckpointingAndTimelineAreValidated) {
  auto issues = [](const std::string& text) -> std::string {
    try {
      parse_scenario(text, "bad.json");
    } catch (const ScenarioError& e) {
      std::string all;
      for (const auto& i : e.issues()) all += i.path + ": " + i.message + "\n";
      return all;
    }
    return "";
  };
  const std::string mlp = R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4]},
    "data": {"kind": "teacher", "teacher": {"in_dim": 8, "out_dim": 4}, "batch_per_rank": 32}, )";
  std::string m = issues(mlp + R"("training": {"steps": 3, "activation_checkpointing": true}})");
  EXPECT_NE(m.find("training.activation_checkpointing: only applies when model.kind is \"gpt2-small\", \"gpt2-xl\", "
                   "\"llama-7b\", \"mpt-125m\""), std::string::npos) << m;
  EXPECT_EQ(issues(mlp + R"("training": {"steps": 50}, "report": {"timeline": true}})"), "");
  m = issues(R"({"name": "t", "model": {"kind": "mlp", "layers": [8, 4]}, "data": {"kind": "teacher",
    "teacher": {"in_dim": 8, "out_dim": 4, "train_samples": 4096}, "batch_per_rank": 32}, "training": {"epochs": 2},
    "cluster": {"ranks": 2}, "report": {"timeline": true}})");
  EXPECT_NE(m.find("report.timeline: a timeline draws runs of at most 50 optimizer steps"), std::string::npos) << m;
  EXPECT_NE(m.find("this run has 128"), std::string::npos) << m;
  EXPECT_EQ(issues(R"({"name": "t", "model": {"kind": "gpt2-small"}, "data": {"kind": "none"},
    "training": {"mode": "timing", "steps": 2, "activation_checkpointing": true}})"), "");
}

// Sizes in the messages take the largest binary unit they hold at least one of, so a small buffer beside 113 GiB of
// model states is not printed as "0.0 GiB" (PowerSGD's factors of LLaMA-7B are a few MiB).
TEST(GpuMemory, SizesArePrintedInTheLargestUnitTheyFill) {
  EXPECT_EQ(binary_size_text(25.0 * 1048576.0, 1), "25.0 MiB");
  EXPECT_EQ(binary_size_text(1.5 * 1073741824.0, 2), "1.50 GiB");
  EXPECT_EQ(binary_size_text(1073741824.0 - 1048576.0, 1), "1023.0 MiB");
  EXPECT_EQ(binary_size_text(1536.0, 1), "1.5 KiB");
  EXPECT_EQ(binary_size_text(512.0, 1), "512 B");
  EXPECT_EQ(binary_size_text(0.0, 1), "0 B");

  RunConfig c = preset("llama-7b");
  c.cluster.ranks = 8;
  c.compression.kind = "powersgd";
  c.compression.rank = 4;
  const std::string m = gpu_memory_skip_reason(c, *make_model(c));
  const size_t at = m.find("compression buffers ");
  ASSERT_NE(at, std::string::npos) << m;
  const std::string size = m.substr(at + 20, m.find_first_of(",)", at) - at - 20);
  EXPECT_EQ(size.find("0.0 "), std::string::npos) << size;
  EXPECT_GT(std::stod(size), 0.0) << size;
  EXPECT_EQ(m.find(" 0.0 GiB"), std::string::npos) << m;
}

}  // namespace
}  // namespace gs
