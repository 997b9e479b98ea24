// Hugging Face config.json files as strata networks (docs/networks.md,
// "Hugging Face configs"). JSON is YAML's flow style, so ConfigNode reads
// the file and every mistake names its line and key. Each decoder family
// strata prices is mapped onto the layers its YAML preset writes (gpt2 as
// configs/networks/gpt2-small.yaml, llama, mistral and qwen2 as
// llama2-7b.yaml, qwen2 with its Q, K and V biases: qkv_bias; gpt_neox as
// transformer blocks with a parallel residual and partial rotary
// positions); a
// key strata does not know, or a value it cannot price, is an error, never
// a guess.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "config_node.h"
#include "network_from_config.h"
#include "strata/model/error.h"
#include "strata/model/network_loader.h"

namespace strata {

namespace {

// Keys of every Hugging Face config that change neither the shapes nor the
// cost of a training step: ids, bookkeeping, initialisation, numerics of the
// inference cache, the checkpoint's storage type (strata's --element decides
// the training one).
constexpr std::string_view kBookkeeping[] = {
    "_name_or_path",        "architectures",     "model_type",   "transformers_version",
    "torch_dtype",          "use_cache",         "bos_token_id", "eos_token_id",
    "pad_token_id",         "initializer_range", "return_dict",  "output_attentions",
    "output_hidden_states", "tokenizer_class",
};

// Where each key of the generated tree came from ("layers[1].repeat":
// num_hidden_layers; "layers[0]": the layer's own, for an error about the
// whole layer), so that a mistake the network loader finds there names the
// config's line and key.
using Origins = std::map<std::string, ConfigNode>;

// A decoder family: the keys it knows beyond kBookkeeping (its own and a
// variant's extra ones), and its mapping.
struct Family {
  std::string_view type;
  std::span<const std::string_view> keys, extraKeys;
  YAML::Node (*layers)(const ConfigNode& root, int& positions, Origins& origins);
};

// GPT-2 (transformers' GPT2Config and GPT2LMHeadModel; Radford et al.
// 2019): learned positions, pre-LN blocks with biased projections, GELU
// MLP, dropout after the embeddings, the attention's and the MLP's
// projections, and on the attention probabilities.
constexpr std::string_view kGpt2Keys[] = {
    "vocab_size",
    "n_positions",
    "n_ctx",
    "n_embd",
    "n_layer",
    "n_head",
    "n_inner",
    "activation_function",
    "resid_pdrop",
    "embd_pdrop",
    "attn_pdrop",
    "layer_norm_epsilon",
    "tie_word_embeddings",
    "add_cross_attention",
    "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn",
    "summary_type",
    "summary_use_proj",
    "summary_activation",
    "summary_proj_to_labels",
    "summary_first_dropout",
    "task_specific_params",
    "n_special",
    "predict_special_tokens",
};

// Llama and Mistral (transformers' LlamaConfig, MistralConfig): rotary
// positions, grouped-query attention without biases, RMSNorm, SwiGLU MLP.
constexpr std::string_view kLlamaKeys[] = {
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
    "attention_dropout",
    "tie_word_embeddings",
    "head_dim",
    "pretraining_tp",
    "sliding_window",
};

// Qwen2 (transformers' Qwen2Config, Qwen2ForCausalLM; Yang et al. 2024):
// Llama's keys and block, with biases on the Q, K and V projections (none
// on the output projection), and a sliding window that applies only with
// use_sliding_window.
constexpr std::string_view kQwen2ExtraKeys[] = {"use_sliding_window", "max_window_layers"};

// GPT-NeoX and Pythia (transformers' GPTNeoXConfig, GPTNeoXForCausalLM;
// Black et al. 2022, Biderman et al. 2023): pre-LN blocks with biased
// projections and a GELU MLP, the MLP beside the attention
// (use_parallel_residual), rotary positions on the first rotary_pct of each
// head's features, an untied output layer (embed_out).
constexpr std::string_view kGptNeoxKeys[] = {
    "vocab_size",          "hidden_size",           "num_hidden_layers",
    "num_attention_heads", "intermediate_size",     "hidden_act",
    "rotary_pct",          "rotary_emb_base",       "max_position_embeddings",
    "layer_norm_eps",      "use_parallel_residual", "tie_word_embeddings",
    "attention_bias",      "attention_dropout",     "hidden_dropout",
    "classifier_dropout",  "rope_scaling",
};

int positive(const ConfigNode& root, std::string_view key) {
  return root.require(key).asPositiveInt();
}

double rateOr(const ConfigNode& root, std::string_view key, double fallback) {
  const auto n = root.getUnlessNull(key);
  if (!n)
    return fallback;
  const double r = n->asDouble();
  if (r < 0 || r >= 1)
    n->fail(fmt::format("a dropout probability must be in [0, 1), got {}", r));
  return r;
}

bool boolOr(const ConfigNode& root, std::string_view key, bool fallback) {
  const auto n = root.getUnlessNull(key);
  return n ? n->asBool() : fallback;
}

// A layer of the YAML tree the network loader reads.
YAML::Node layer(std::string_view name, std::string_view kind) {
  YAML::Node l;
  l["name"] = std::string(name);
  l["kind"] = std::string(kind);
  return l;
}

void headsDivide(const ConfigNode& root, std::string_view heads, int h, int width,
                 std::string_view widthKey) {
  if (width % h != 0)
    root.require(heads).fail(
        fmt::format("{} heads do not divide {} {}: every head must have the "
                    "same width",
                    h, widthKey, width));
}

// The output layer (bias-free, tied to the token table `tiedTo` unless "")
// and the loss, last in every family.
void addOutput(const ConfigNode& root, YAML::Node& layers, Origins& origins, int vocab,
               const std::string& tiedTo) {
  origins.emplace(fmt::format("layers[{}]", layers.size()), root.require("vocab_size"));
  auto head = layer("lm_head", "fc");
  head["outputs"] = vocab;
  head["flatten"] = false;
  head["bias"] = false;
  if (!tiedTo.empty())
    head["tied"] = tiedTo;
  layers.push_back(head);
  layers.push_back(layer("loss", "softmax"));
}

YAML::Node gpt2Layers(const ConfigNode& root, int& positions, Origins& origins) {
  const int width = positive(root, "n_embd");
  const int heads = positive(root, "n_head");
  headsDivide(root, "n_head", heads, width, "n_embd");
  positions = positive(root, "n_positions");
  if (const auto ctx = root.getUnlessNull("n_ctx"); ctx && ctx->asPositiveInt() != positions)
    ctx->fail(fmt::format("{} differs from n_positions {}: strata prices one context length",
                          ctx->asPositiveInt(), positions));
  int inner = 4 * width;  // GPT2Config: n_inner null is 4 x n_embd
  if (const auto n = root.getUnlessNull("n_inner"))
    inner = n->asPositiveInt();
  if (const auto act = root.getUnlessNull("activation_function")) {
    const std::string a = act->asString();
    if (a != "gelu_new" && a != "gelu" && a != "gelu_fast" && a != "gelu_pytorch_tanh")
      act->fail("'" + a +
                "' is not a GELU: strata's transformer block prices GELU (gelu_new, gelu, "
                "gelu_fast, gelu_pytorch_tanh)");
  }
  if (boolOr(root, "add_cross_attention", false))
    root.require("add_cross_attention")
        .fail("cross-attention (an encoder-decoder GPT-2) is not a decoder strata prices");
  // GPT2Config's defaults: 0.1 for each dropout.
  const double resid = rateOr(root, "resid_pdrop", 0.1);
  const double embd = rateOr(root, "embd_pdrop", 0.1);
  const double attn = rateOr(root, "attn_pdrop", 0.1);
  const int vocab = positive(root, "vocab_size");
  const bool tied = boolOr(root, "tie_word_embeddings", true);

  YAML::Node layers;
  origins.emplace("layers[0]", root.require("vocab_size"));
  origins.emplace("layers[0].positions", root.require("n_positions"));
  auto wte = layer("wte", "embedding");
  wte["vocab"] = vocab;
  wte["outputs"] = width;
  wte["positions"] = positions;
  layers.push_back(wte);
  if (embd > 0) {
    auto drop = layer("drop", "dropout");
    drop["rate"] = embd;
    layers.push_back(drop);
  }
  auto h = layer("h", "transformer");
  h["heads"] = heads;
  h["hidden"] = inner;
  if (resid > 0)
    h["dropout"] = resid;
  if (attn > 0)
    h["attention_dropout"] = attn;
  h["repeat"] = positive(root, "n_layer");
  layers.push_back(h);
  const int hi = static_cast<int>(layers.size()) - 1;
  origins.emplace(fmt::format("layers[{}]", hi), root.require("n_embd"));
  origins.emplace(fmt::format("layers[{}].heads", hi), root.require("n_head"));
  origins.emplace(fmt::format("layers[{}].repeat", hi), root.require("n_layer"));
  if (const auto n = root.getUnlessNull("n_inner"))
    origins.emplace(fmt::format("layers[{}].hidden", hi), *n);
  layers.push_back(layer("ln_f", "layernorm"));
  addOutput(root, layers, origins, vocab, tied ? "wte" : "");
  return layers;
}

// The token table of a family with rotary positions (no position table),
// its first layer.
YAML::Node rotaryEmbedding(const ConfigNode& root, Origins& origins, std::string_view name,
                           int width) {
  origins.emplace("layers[0]", root.require("vocab_size"));
  auto embed = layer(name, "embedding");
  embed["vocab"] = positive(root, "vocab_size");
  embed["outputs"] = width;
  embed["positions"] = 0;  // rotary: no table
  return embed;
}

// Where the repeated block (layers[1]) of transformers' usual keys comes
// from.
void blockOrigins(const ConfigNode& root, Origins& origins) {
  origins.emplace("layers[1]", root.require("hidden_size"));
  origins.emplace("layers[1].heads", root.require("num_attention_heads"));
  origins.emplace("layers[1].hidden", root.require("intermediate_size"));
  origins.emplace("layers[1].repeat", root.require("num_hidden_layers"));
}

YAML::Node gptNeoxLayers(const ConfigNode& root, int& positions, Origins& origins) {
  const int width = positive(root, "hidden_size");
  const int heads = positive(root, "num_attention_heads");
  headsDivide(root, "num_attention_heads", heads, width, "hidden_size");
  positions = positive(root, "max_position_embeddings");
  if (const auto act = root.getUnlessNull("hidden_act")) {
    const std::string a = act->asString();
    if (a != "gelu" && a != "gelu_new" && a != "gelu_fast" && a != "gelu_pytorch_tanh")
      act->fail("'" + a +
                "' is not a GELU: strata's transformer block prices GELU (gelu, gelu_new, "
                "gelu_fast, gelu_pytorch_tanh)");
  }
  // rope_scaling (as Llama's) stretches the angles: no shape or cost.
  if (!boolOr(root, "attention_bias", true))
    root.require("attention_bias")
        .fail("strata's transformer block has biases on every projection (attention_bias true)");
  // GPTNeoXConfig's defaults: rotary_pct 0.25, rotary_emb_base 10000,
  // parallel residual, untied embeddings, no dropout.
  const int dh = width / heads;
  double pct = 0.25;
  std::optional<ConfigNode> pctNode = root.getUnlessNull("rotary_pct");
  if (pctNode) {
    pct = pctNode->asDouble();
    if (pct <= 0 || pct > 1)
      pctNode->fail(
          fmt::format("the share of each head's features that rotary positions turn "
                      "must be in (0, 1], got {}",
                      pct));
  }
  // transformers: rotary_ndims = int(head_size * rotary_pct).
  const int turned = static_cast<int>(dh * pct);
  if (turned < 2 || turned % 2 != 0) {
    const std::string why = fmt::format(
        "turns int({} x {}) = {} of each head's {} features; rotary positions turn pairs of "
        "them, at least one",
        dh, pct, turned, dh);
    if (pctNode)
      pctNode->fail(why);
    root.require("hidden_size").fail(why + " (rotary_pct's default 0.25)");
  }
  const double resid = rateOr(root, "hidden_dropout", 0.0);
  const double attn = rateOr(root, "attention_dropout", 0.0);
  rateOr(root, "classifier_dropout", 0.1);  // a classification head's: not in a causal LM
  const int vocab = positive(root, "vocab_size");
  const bool tied = boolOr(root, "tie_word_embeddings", false);

  YAML::Node layers;
  layers.push_back(rotaryEmbedding(root, origins, "embed_in", width));
  auto h = layer("h", "transformer");
  h["heads"] = heads;
  h["hidden"] = positive(root, "intermediate_size");
  h["parallel"] = boolOr(root, "use_parallel_residual", true);
  h["rotary"] = true;
  if (turned != dh)
    h["rotary_dims"] = turned;
  if (const auto base = root.getUnlessNull("rotary_emb_base"))
    h["rotary_base"] = base->asDouble();
  if (resid > 0)
    h["dropout"] = resid;
  if (attn > 0)
    h["attention_dropout"] = attn;
  h["repeat"] = positive(root, "num_hidden_layers");
  layers.push_back(h);
  blockOrigins(root, origins);
  for (const auto& [key, from] : {std::pair{"rotary_base", "rotary_emb_base"},
                                  {"rotary_dims", "rotary_pct"},
                                  {"attention_dropout", "attention_dropout"},
                                  {"dropout", "hidden_dropout"}})
    if (const auto n = root.getUnlessNull(from))
      origins.emplace(std::string("layers[1].") + key, *n);
  layers.push_back(layer("final_layer_norm", "layernorm"));
  addOutput(root, layers, origins, vocab, tied ? "embed_in" : "");
  return layers;
}

// The Llama-like families: what differs from Llama's own mapping.
struct LlamaVariant {
  bool qkvBias = false;        // biases on Q, K and V alone (Qwen2)
  bool windowIfAsked = false;  // sliding_window applies only with use_sliding_window
};

YAML::Node llamaLikeLayers(const ConfigNode& root, int& positions, Origins& origins,
                           LlamaVariant variant);

YAML::Node llamaLayers(const ConfigNode& root, int& positions, Origins& origins) {
  return llamaLikeLayers(root, positions, origins, {});
}

YAML::Node qwen2Layers(const ConfigNode& root, int& positions, Origins& origins) {
  return llamaLikeLayers(root, positions, origins, {.qkvBias = true, .windowIfAsked = true});
}

YAML::Node llamaLikeLayers(const ConfigNode& root, int& positions, Origins& origins,
                           LlamaVariant variant) {
  const int width = positive(root, "hidden_size");
  const int heads = positive(root, "num_attention_heads");
  headsDivide(root, "num_attention_heads", heads, width, "hidden_size");
  int kvHeads = heads;  // LlamaConfig: num_key_value_heads null is multi-head
  if (const auto kv = root.getUnlessNull("num_key_value_heads")) {
    kvHeads = kv->asPositiveInt();
    if (heads % kvHeads != 0)
      kv->fail(
          fmt::format("{} key/value heads do not divide the {} attention heads", kvHeads, heads));
  }
  if (const auto d = root.getUnlessNull("head_dim"); d && d->asPositiveInt() != width / heads)
    d->fail(
        fmt::format("heads of {} with hidden_size {} and {} heads (of {}): strata's attention "
                    "layer has heads of hidden_size / heads",
                    d->asPositiveInt(), width, heads, width / heads));
  positions = positive(root, "max_position_embeddings");
  if (const auto act = root.getUnlessNull("hidden_act"); act && act->asString() != "silu")
    act->fail("'" + act->asString() +
              "': strata's llama block prices the SwiGLU MLP (silu), nothing else");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (boolOr(root, key, false))
      root.require(key).fail("biases are not in strata's llama block (it has none)");
  // Qwen2Config: use_sliding_window false (its default) leaves sliding_window
  // unused.
  const bool windowed = !variant.windowIfAsked || boolOr(root, "use_sliding_window", false);
  if (const auto w = root.getUnlessNull("sliding_window");
      w && w->asPositiveInt() < positions && windowed)
    w->fail(
        fmt::format("a window of {} positions is shorter than the {} priced "
                    "(max_position_embeddings): strata prices full causal attention, not a "
                    "sliding window",
                    w->asPositiveInt(), positions));
  const int vocab = positive(root, "vocab_size");
  const bool tied = boolOr(root, "tie_word_embeddings", false);

  YAML::Node layers;
  layers.push_back(rotaryEmbedding(root, origins, "embed", width));
  auto h = layer("h", "llama");
  h["heads"] = heads;
  h["kv_heads"] = kvHeads;
  h["hidden"] = positive(root, "intermediate_size");
  if (variant.qkvBias)
    h["qkv_bias"] = true;
  // LlamaConfig's defaults: rms_norm_eps 1e-6, rope_theta 10000.
  std::string eps = "1e-6";
  if (const auto e = root.getUnlessNull("rms_norm_eps")) {
    e->asDouble();  // a number, checked here with its line
    eps = e->asString();
  }
  h["eps"] = eps;
  if (const auto base = root.getUnlessNull("rope_theta"))
    h["rotary_base"] = base->asDouble();
  if (const double d = rateOr(root, "attention_dropout", 0.0); d > 0)
    h["attention_dropout"] = d;
  h["repeat"] = positive(root, "num_hidden_layers");
  blockOrigins(root, origins);
  for (const auto& [key, from] : {std::pair{"eps", "rms_norm_eps"},
                                  {"rotary_base", "rope_theta"},
                                  {"kv_heads", "num_key_value_heads"},
                                  {"attention_dropout", "attention_dropout"}})
    if (const auto n = root.getUnlessNull(from))
      origins.emplace(std::string("layers[1].") + key, *n);
  if (const auto n = root.getUnlessNull("rms_norm_eps"))
    origins.emplace("layers[2].eps", *n);
  layers.push_back(h);
  auto norm = layer("norm", "rmsnorm");
  norm["eps"] = eps;
  layers.push_back(norm);
  addOutput(root, layers, origins, vocab, tied ? "embed" : "");
  return layers;
}

constexpr Family kFamilies[] = {
    {"gpt2", kGpt2Keys, {}, gpt2Layers},
    {"gpt_neox", kGptNeoxKeys, {}, gptNeoxLayers},
    {"llama", kLlamaKeys, {}, llamaLayers},
    {"mistral", kLlamaKeys, {}, llamaLayers},
    {"qwen2", kLlamaKeys, kQwen2ExtraKeys, qwen2Layers},
};

std::string familyNames() {
  std::string s;
  for (const auto& f : kFamilies)
    s += (s.empty() ? "" : ", ") + std::string(f.type);
  return s;
}

// The network's name: the checkpoint's folder for config.json
// (meta-llama/Llama-2-7b-hf/config.json: "Llama-2-7b-hf"), else the stem.
std::string nameOf(const std::string& path) {
  const std::filesystem::path p(path);
  std::error_code error;  // no current folder: the path as given
  auto whole = std::filesystem::absolute(p, error);
  if (error)
    whole = p;
  const auto folder = whole.parent_path().filename().string();
  return p.filename() == "config.json" && !folder.empty() ? folder : p.stem().string();
}

}  // namespace

Network loadHfConfigNetwork(const std::string& path) {
  const ConfigNode root = ConfigNode::loadFile(path);
  const auto typeNode = root.require("model_type");
  const std::string type = typeNode.asString();
  const Family* family = nullptr;
  for (const auto& f : kFamilies)
    if (f.type == type)
      family = &f;
  if (!family)
    typeNode.fail("'" + type + "' is not a decoder family strata maps (it maps " + familyNames() +
                  "; write the network as YAML, docs/configs.md)");
  for (const auto& [key, node] : root.entries()) {
    bool known = false;
    for (auto k : kBookkeeping)
      known = known || k == key;
    for (auto k : family->keys)
      known = known || k == key;
    for (auto k : family->extraKeys)
      known = known || k == key;
    if (!known)
      node.fail("strata does not know this key of a " + type +
                " config, so it cannot say whether it changes the model's shapes or cost; "
                "remove it if it does not");
  }
  int positions = 0;
  Origins origins;
  YAML::Node layers = family->layers(root, positions, origins);
  const std::string name = nameOf(path);
  YAML::Node net;
  net["name"] = name;
  net["description"] = fmt::format("Hugging Face {} config {}", type, path);
  YAML::Node input;
  input["channels"] = 1;
  input["height"] = positions;  // the context: one token id per position
  input["width"] = 1;
  net["input"] = input;
  net["layers"] = layers;
  try {
    return networkFromConfig(ConfigNode(net, std::make_shared<const std::string>(path), "", 0),
                             path, name);
  } catch (const ConfigError& e) {
    // A mistake found in the generated tree: said at the config key it came
    // from (the key itself, else its layer's), the tree's key in brackets.
    auto it = origins.find(e.key());
    if (it == origins.end() && e.key().find('.') != std::string::npos)
      it = origins.find(e.key().substr(0, e.key().find('.')));
    const std::string prefix = ConfigError(e.file(), e.line(), e.key(), "").what();
    std::string message = e.what();
    if (message.rfind(prefix, 0) == 0)
      message = message.substr(prefix.size());
    if (it == origins.end())
      throw ConfigError(path, 0, "", message + " (strata's " + e.key() + ")");
    it->second.fail(message + " (strata's " + e.key() + ")");
  }
}

}  // namespace strata
