// Hugging Face config.json files as networks (model/config/src/hf_config.cpp):
// the published checkpoints' parameter counts, equality with the YAML presets
// layer by layer, the network's name, and every mistake named by file, line
// and key. Fixtures: tests/fixtures/hf/<checkpoint>/config.json, the
// published configs (see their README).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "helpers.h"
#include "strata/model/error.h"
#include "strata/model/network_loader.h"
#include "strata/model/tensor_parallel.h"

using namespace strata;
using strata::test::presetNetwork;

namespace {

std::string fixture(const std::string& checkpoint) {
  return std::string(STRATA_HF_FIXTURES) + "/" + checkpoint + "/config.json";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `text` written as <tmp>/strata-hf/<folder>/<file> and loaded.
Network loadText(const std::string& folder, const std::string& file, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "strata-hf" / folder;
  std::filesystem::create_directories(dir);
  const auto path = (dir / file).string();
  std::ofstream(path) << text;
  return loadNetwork(path);
}

// The ConfigError's message for a fixture with `from` replaced by `to`.
std::string errorOf(const std::string& checkpoint, const std::string& from, const std::string& to) {
  std::string text = slurp(fixture(checkpoint));
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  try {
    loadText("bad", "config.json", text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Two networks with the same layers: kinds, shapes, parameters and costs.
void checkSameLayers(const Network& a, const Network& b) {
  REQUIRE(a.layers.size() == b.layers.size());
  CHECK(a.input.c == b.input.c);
  CHECK(a.input.h == b.input.h);
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const auto& x = a.layers[i];
    const auto& y = b.layers[i];
    INFO(x.name << " / " << y.name);
    CHECK(x.name == y.name);
    CHECK(x.kind == y.kind);
    CHECK(x.inputs == y.inputs);
    CHECK(x.outShape.c == y.outShape.c);
    CHECK(x.outShape.h == y.outShape.h);
    CHECK(x.params == y.params);
    CHECK(x.fwdFlops == y.fwdFlops);
    CHECK(x.bwdDataFlops == y.bwdDataFlops);
    CHECK(x.bwdWeightsFlops == y.bwdWeightsFlops);
    CHECK(x.spec.tiedTo == y.spec.tiedTo);
  }
}

}  // namespace

TEST_CASE("Hugging Face configs have the published checkpoints' parameter counts",
          "[network][hf]") {
  // The counts Hugging Face reports for each checkpoint (model cards; the
  // sums are written out in docs/networks.md).
  CHECK(loadNetwork(fixture("gpt2")).totalParams() == 124'439'808);
  CHECK(loadNetwork(fixture("Llama-2-7b-hf")).totalParams() == 6'738'415'616);
  CHECK(loadNetwork(fixture("Meta-Llama-3-8B")).totalParams() == 8'030'261'248);
  CHECK(loadNetwork(fixture("Mistral-7B-v0.3")).totalParams() == 7'248'023'552);
  CHECK(loadNetwork(fixture("Llama-3.2-1B")).totalParams() == 1'235'814'400);
  CHECK(loadNetwork(fixture("Qwen2-7B")).totalParams() == 7'615'616'512);
  CHECK(loadNetwork(fixture("Qwen2-0.5B")).totalParams() == 494'032'768);
  // Pythia's model cards give the non-embedding parameters (all but the
  // input and output tables, V x d each): 85,056,000 and 6,444,163,072.
  CHECK(loadNetwork(fixture("pythia-160m")).totalParams() == 85'056'000 + 2 * 50'304 * 768);
  CHECK(loadNetwork(fixture("pythia-160m")).totalParams() == 162'322'944);
  CHECK(loadNetwork(fixture("pythia-6.9b")).totalParams() == 6'444'163'072 + 2 * 50'432 * 4096);
}

TEST_CASE("GPT-NeoX: a parallel residual, a quarter of each head turned, untied output",
          "[network][hf]") {
  const auto n = loadNetwork(fixture("pythia-160m"));
  // embed_in, 12 blocks of 7 layers, final_layer_norm, lm_head, loss.
  REQUIRE(n.layers.size() == 1 + 12 * 7 + 3);
  const auto at = [&](const char* name) -> const Layer& {
    const int i = n.find(name);
    REQUIRE(i >= 0);
    return n.layers[static_cast<size_t>(i)];
  };
  const Layer& attn = at("h.3.attn");
  CHECK(attn.spec.rotary);
  CHECK(attn.spec.bias);
  CHECK(attn.rotaryFeatures() == 16);  // int(64 x 0.25)
  CHECK(attn.params == 4 * 768 * 768 + 4 * 768);
  // ln2 reads the block's input, not the attention's sum: one add of three.
  const Layer& ln2 = at("h.3.ln2");
  CHECK(ln2.inputs == at("h.3.ln1").inputs);
  const Layer& add = at("h.3.add");
  CHECK(add.inputs ==
        std::vector<int>{at("h.3.ln1").inputs[0], n.find("h.3.attn"), n.find("h.3.fc2")});
  CHECK(n.find("h.3.add1") < 0);
  CHECK(at("h.3.fc1").params == 768 * 3072 + 3072);
  CHECK(at("lm_head").spec.tiedTo == -1);
  CHECK(at("lm_head").params == 50'304 * 768);
  CHECK(at("embed_in").params == 50'304 * 768);
  // The rotation's cost: 3 FLOPs per turned element of Q and K, a quarter of
  // them; the same block with every feature turned costs 3 T 2 d (1 - 1/4)
  // more.
  std::string text = slurp(fixture("pythia-160m"));
  text.replace(text.find("\"rotary_pct\": 0.25"), 18, "\"rotary_pct\": 1.00");
  const auto whole = loadText("pythia-whole-rotary", "config.json", text);
  const Layer& wholeAttn = whole.layers[static_cast<size_t>(whole.find("h.3.attn"))];
  CHECK(wholeAttn.rotaryFeatures() == 64);
  CHECK(wholeAttn.fwdFlops - attn.fwdFlops == 3.0 * 2048 * 2 * 768 * 0.75);
  CHECK(wholeAttn.params == attn.params);
  // use_parallel_residual false: GPT-2's sequential block.
  text = slurp(fixture("pythia-160m"));
  text.replace(text.find("\"use_parallel_residual\": true"), 29,
               "\"use_parallel_residual\": false");
  const auto sequential = loadText("pythia-sequential", "config.json", text);
  CHECK(sequential.find("h.3.add1") >= 0);
  CHECK(sequential.totalParams() == n.totalParams());
  CHECK(sequential.totalTrainFlops() == n.totalTrainFlops());
  // Tensor parallelism prices the sequential block; the parallel one's single
  // sum per block is refused, naming the add.
  CHECK(tensorParallelObstacle(sequential, 2, false).empty());
  CHECK_THAT(tensorParallelObstacle(n, 2, false),
             Catch::Contains("layer 'h.1.add' adds an attention's and an MLP's outputs side by "
                             "side (a parallel residual)"));
}

TEST_CASE("Qwen2 is Llama's block with biases on Q, K and V alone", "[network][hf]") {
  const auto qwen = loadNetwork(fixture("Qwen2-7B"));
  const auto& attn = qwen.layers[static_cast<size_t>(qwen.find("h.1.attn"))];
  CHECK(attn.spec.qkvBias);
  CHECK_FALSE(attn.spec.bias);
  CHECK(attn.spec.heads == 28);
  CHECK(attn.spec.kvHeads == 4);
  CHECK(attn.spec.rotaryBase == 1e6);
  // d = 3584, 128 features a head, 4 key/value heads: Wq and Wo d^2 each, Wk
  // and Wv d x 512 each, and the biases of Q (d), K and V (512 each), none
  // for the output projection.
  const int64_t d = 3584, kv = 4 * 128;
  CHECK(attn.params == 2 * d * d + 2 * d * kv + d + 2 * kv);
  // Its costs are Llama's but for the bias: the same config without the
  // biases prices as a llama.
  std::string text = slurp(fixture("Qwen2-7B"));
  text.replace(text.find("\"qwen2\""), 7, "\"llama\"");
  for (const char* key : {"  \"max_window_layers\": 28,\n", "  \"use_sliding_window\": false,\n"})
    text.erase(text.find(key), std::string(key).size());
  const auto llama = loadText("qwen-as-llama", "config.json", text);
  REQUIRE(llama.layers.size() == qwen.layers.size());
  CHECK(qwen.totalParams() - llama.totalParams() == 28 * (d + 2 * kv));
  CHECK(llama.totalFwdFlops() == qwen.totalFwdFlops());
  // In a YAML network: qkv_bias on an attention layer or a llama block;
  // with bias: true (which has them and the output's) it is a mistake.
  const std::string yaml =
      "name: q\ninput: {channels: 1, height: 6, width: 1}\nlayers:\n"
      "  - {name: embed, kind: embedding, vocab: 11, outputs: 8}\n"
      "  - {name: h, kind: llama, heads: 4, kv_heads: 2, hidden: 12, qkv_bias: true}\n"
      "  - {name: attn, kind: attention, heads: 2, qkv_bias: true}\n";
  const auto tiny = loadText("qwen-yaml", "q.yaml", yaml);
  // d = 8 of 4 heads (dh 2), 2 key/value heads: Wq 8 x 8, Wk and Wv 4 x 8,
  // Wo 8 x 8, then the biases of Q (8), K and V (4 each).
  CHECK(tiny.layers[static_cast<size_t>(tiny.find("h.attn"))].params ==
        (8 + 4 + 4) * 8 + 8 * 8 + 8 + 4 + 4);
  CHECK(tiny.layers[static_cast<size_t>(tiny.find("attn"))].params == (24 + 8) * 8 + 24);
  try {
    loadText("qwen-yaml-bad", "q.yaml",
             "name: q\ninput: {channels: 8, height: 6, width: 1}\nlayers:\n"
             "  - {name: attn, kind: attention, heads: 2, bias: true, qkv_bias: true}\n");
    FAIL("bias and qkv_bias together were taken");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains(":4: layers[0].qkv_bias: qkv_bias is the Q, K and V "
                                         "projections' biases alone"));
  }
  // The 0.5B ties its output layer to the token table.
  const auto small = loadNetwork(fixture("Qwen2-0.5B"));
  CHECK(small.layers[static_cast<size_t>(small.find("lm_head"))].spec.tiedTo ==
        small.find("embed"));
}

TEST_CASE("a Hugging Face config is its YAML preset, layer by layer", "[network][hf]") {
  checkSameLayers(loadNetwork(fixture("Llama-2-7b-hf")), presetNetwork("llama2-7b"));
  checkSameLayers(loadNetwork(fixture("Meta-Llama-3-8B")), presetNetwork("llama3-8b"));
  // GPT-2: the preset leaves attn_pdrop out; Hugging Face's GPT2Attention
  // drops the probabilities (0.1), which costs traffic but no parameters.
  const auto hf = loadNetwork(fixture("gpt2"));
  const auto preset = presetNetwork("gpt2-small");
  REQUIRE(hf.layers.size() == preset.layers.size());
  for (size_t i = 0; i < hf.layers.size(); ++i) {
    INFO(hf.layers[i].name);
    CHECK(hf.layers[i].name == preset.layers[i].name);
    CHECK(hf.layers[i].params == preset.layers[i].params);
    CHECK(hf.layers[i].fwdFlops == preset.layers[i].fwdFlops);
    if (hf.layers[i].kind == LayerKind::kAttention) {
      CHECK(hf.layers[i].spec.attentionDropout == 0.1);
      CHECK(preset.layers[i].spec.attentionDropout == 0.0);
    }
  }
  CHECK(hf.layers[static_cast<size_t>(hf.find("lm_head"))].spec.tiedTo == hf.find("wte"));
  // Llama 3.2 1B ties its output layer to the token table; its context is
  // max_position_embeddings (131,072), rope_scaling changes no shape.
  const auto small = loadNetwork(fixture("Llama-3.2-1B"));
  CHECK(small.layers[static_cast<size_t>(small.find("lm_head"))].spec.tiedTo ==
        small.find("embed"));
  CHECK(small.input.h == 131072);
  const auto& attn = small.layers[static_cast<size_t>(small.find("h.1.attn"))];
  CHECK(attn.spec.heads == 32);
  CHECK(attn.spec.kvHeads == 8);
  CHECK(attn.spec.rotaryBase == 500000.0);
}

TEST_CASE("a Hugging Face network is named after its checkpoint's folder", "[network][hf]") {
  CHECK(loadNetwork(fixture("Llama-2-7b-hf")).name == "Llama-2-7b-hf");
  const std::string text = slurp(fixture("gpt2"));
  CHECK(loadText("named", "my-gpt.json", text).name == "my-gpt");
  CHECK(loadText("gpt2-medium", "config.json", text).name == "gpt2-medium");
  CHECK(loadNetwork(fixture("gpt2")).description == "Hugging Face gpt2 config " + fixture("gpt2"));
}

TEST_CASE("Hugging Face configs strata cannot price are one error naming file, line and key",
          "[network][hf][errors]") {
  using Catch::Contains;
  // Unknown family, unknown key, values with no strata equivalent.
  CHECK_THAT(errorOf("Llama-2-7b-hf", "\"llama\"", "\"gptj\""),
             Contains("config.json:12: model_type: 'gptj' is not a decoder family strata "
                      "maps (it maps gpt2, gpt_neox, llama, mistral, qwen2"));
  CHECK_THAT(errorOf("pythia-160m", "\"rotary_pct\": 0.25", "\"rotary_pct\": 0.01"),
             Contains(":17: rotary_pct: turns int(64 x 0.01) = 0 of each head's 64 features"));
  CHECK_THAT(errorOf("pythia-160m", "\"rotary_pct\": 0.25", "\"rotary_pct\": 1.5"),
             Contains(":17: rotary_pct: the share of each head's features that rotary "
                      "positions turn must be in (0, 1], got 1.5"));
  CHECK_THAT(errorOf("pythia-160m", "\"gelu\"", "\"relu\""),
             Contains(":7: hidden_act: 'relu' is not a GELU"));
  CHECK_THAT(errorOf("pythia-160m", "\"use_cache\": true,",
                     "\"use_cache\": true, \"attention_bias\": false,"),
             Contains(":21: attention_bias: strata's transformer block has biases"));
  CHECK_THAT(
      errorOf("pythia-160m", "\"use_cache\": true,", "\"use_cache\": true, \"num_experts\": 8,"),
      Contains(":21: num_experts: strata does not know this key of a gpt_neox config"));
  // Qwen2's window applies only with use_sliding_window; then it must cover
  // the context.
  CHECK(errorOf("Qwen2-0.5B", "\"sliding_window\": 131072", "\"sliding_window\": 4096").empty());
  std::string windowed = slurp(fixture("Qwen2-0.5B"));
  windowed.replace(windowed.find("131072,\n  \"tie"), 6, "4096");
  windowed.replace(windowed.find("\"use_sliding_window\": false"), 27,
                   "\"use_sliding_window\": true");
  try {
    loadText("qwen-windowed", "config.json", windowed);
    FAIL("a window shorter than the context was priced");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Contains(":20: sliding_window: a window of 4096 positions is shorter "
                                  "than the 131072 priced"));
  }
  CHECK_THAT(
      errorOf("Llama-2-7b-hf", "\"use_cache\": true,", "\"use_cache\": true, \"num_experts\": 8,"),
      Contains("config.json:22: num_experts: strata does not know this key of a llama "
               "config"));
  CHECK_THAT(errorOf("Llama-2-7b-hf", "\"silu\"", "\"gelu\""),
             Contains(":7: hidden_act: 'gelu': strata's llama block prices the SwiGLU MLP"));
  CHECK_THAT(errorOf("Meta-Llama-3-8B", "\"attention_bias\": false", "\"attention_bias\": true"),
             Contains(":5: attention_bias: biases are not in strata's llama block"));
  CHECK_THAT(errorOf("Mistral-7B-v0.3", "\"sliding_window\": null", "\"sliding_window\": 4096"),
             Contains(":19: sliding_window: a window of 4096 positions is shorter than the 32768 "
                      "priced"));
  CHECK_THAT(errorOf("Mistral-7B-v0.3", "\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5"),
             Contains(":16: num_key_value_heads: 5 key/value heads do not divide the 32"));
  CHECK_THAT(errorOf("Llama-3.2-1B", "\"head_dim\": 64", "\"head_dim\": 128"),
             Contains(":9: head_dim: heads of 128 with hidden_size 2048 and 32 heads (of 64)"));
  CHECK_THAT(errorOf("gpt2", "\"n_head\": 12", "\"n_head\": 10"),
             Contains(":15: n_head: 10 heads do not divide n_embd 768"));
  CHECK_THAT(errorOf("gpt2", "\"n_ctx\": 1024", "\"n_ctx\": 2048"),
             Contains(":13: n_ctx: 2048 differs from n_positions 1024"));
  CHECK_THAT(errorOf("gpt2", "\"gelu_new\"", "\"relu\""),
             Contains(":2: activation_function: 'relu' is not a GELU"));
  CHECK_THAT(errorOf("gpt2", "\"attn_pdrop\": 0.1", "\"attn_pdrop\": 1.5"),
             Contains(":6: attn_pdrop: a dropout probability must be in [0, 1), got 1.5"));
  CHECK_THAT(errorOf("gpt2", "\"n_layer\": 12,", ""), Contains("n_layer: missing required key"));
  // Found by the network loader in the generated layers: said at the key
  // they came from.
  CHECK_THAT(
      errorOf("Llama-2-7b-hf", "\"num_hidden_layers\": 32", "\"num_hidden_layers\": 5000000"),
      Contains(":14: num_hidden_layers: 5000000 blocks would make more than 100000 layers"));
  CHECK_THAT(errorOf("Llama-2-7b-hf", "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": -1e-05"),
             Contains(":17: rms_norm_eps: must be in (0, 1), got -1e-05 (strata's layers[1].eps)"));
  CHECK_THAT(errorOf("Llama-2-7b-hf", "\"vocab_size\": 32000", "\"vocab_size\": 900000000000"),
             Contains(":23: vocab_size: is too large"));
  CHECK_THAT(errorOf("Llama-2-7b-hf", "\"model_type\": \"llama\",", ""),
             Contains("model_type: missing required key"));
  CHECK_THAT(errorOf("gpt2", "{", "["), Contains("syntax error"));
  CHECK(errorOf("gpt2", "\"n_embd\": 768", "\"n_embd\": 768").empty());
}
