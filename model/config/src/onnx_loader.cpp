// Imports an ONNX model as a strata Network (docs/onnx.md).
//
// The graph's nodes are walked in their (topological) order; each maps onto
// one strata layer, onto none (Identity, a flattening Flatten/Reshape, a bias
// Add folded into the fc before it), or is one clear error naming the node.
// Shapes and costs are strata's own (deriveLayer); where the graph states a
// value's shape, the two must agree. Only the dims of initializers are read:
// weights stored as external data are never opened.
#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "strata/model/checked.h"
#include "strata/model/error.h"
#include "strata/model/limits.h"
#include "strata/model/network.h"
#include "strata/model/network_loader.h"

namespace strata {

namespace {

constexpr const char* kSupported =
    "Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Relu, Gelu, "
    "BatchNormalization, LayerNormalization, Softmax (last), Dropout, Add, Flatten, Reshape "
    "(flattening), Identity, Constant, Gemm, MatMul (by a weight), Gather (embedding), "
    "com.microsoft Attention";

using Dims = std::vector<int64_t>;

// What a named ONNX value is to the importer.
enum class ValueKind {
  kActivation,  // a per-example tensor some layer (or the network input) produces
  kTokens,      // the network input of token ids (read only by an embedding Gather)
  kConstant,    // an initializer or a Constant node's tensor: weights, shapes, ratios
  kPositions,   // rows of a position table gathered at constant ids (GPT-2's wpe)
};

struct Value {
  ValueKind kind = ValueKind::kActivation;
  int layer = -1;                             // producing layer; -1: the network input
  int rank = 0;                               // per-example rank: 1 [F], 2 [T, F] or 3 [C, H, W]
  bool flat = false;                          // the layer's C x H x W read as one vector (Flatten)
  const onnx::TensorProto* tensor = nullptr;  // kConstant
  int64_t rows = 0;                           // kPositions: rows of the table
  int64_t width = 0;                          // kPositions: features per row
};

// What a com.microsoft Attention still needs from the nodes after it:
// strata's attention layer includes the output projection, which the op
// leaves to a following MatMul (and bias Add).
struct AttentionState {
  bool projection = false;  // the MatMul by a [D, D] weight was folded in
  bool outputBias = false;  // and its bias Add
};

std::string dimsText(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i)
    s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

Dims tensorDims(const onnx::TensorProto& t) {
  return Dims(t.dims().begin(), t.dims().end());
}

int64_t elementsOf(const Dims& d) {
  int64_t n = 1;
  for (auto x : d)
    n *= x;
  return n;
}

// The int64 values of a tensor stored in the file itself; nullopt for
// external data (never read) or another element type.
std::optional<std::vector<int64_t>> inlineInt64s(const onnx::TensorProto& t) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL || t.data_type() != onnx::TensorProto::INT64)
    return std::nullopt;
  if (t.int64_data_size() > 0)
    return std::vector<int64_t>(t.int64_data().begin(), t.int64_data().end());
  const auto& raw = t.raw_data();
  if (raw.size() % sizeof(int64_t) != 0 || (raw.empty() && elementsOf(tensorDims(t)) != 0))
    return std::nullopt;
  std::vector<int64_t> v(raw.size() / sizeof(int64_t));
  std::memcpy(v.data(), raw.data(), raw.size());  // ONNX stores little-endian, as x86 and ARM
  return v;
}

// The one float value of a scalar tensor stored in the file; nullopt otherwise.
std::optional<double> inlineScalar(const onnx::TensorProto& t) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL || elementsOf(tensorDims(t)) != 1)
    return std::nullopt;
  if (t.data_type() == onnx::TensorProto::FLOAT) {
    if (t.float_data_size() == 1)
      return t.float_data(0);
    if (t.raw_data().size() == sizeof(float)) {
      float f = 0;
      std::memcpy(&f, t.raw_data().data(), sizeof f);
      return f;
    }
  } else if (t.data_type() == onnx::TensorProto::DOUBLE) {
    if (t.double_data_size() == 1)
      return t.double_data(0);
    if (t.raw_data().size() == sizeof(double)) {
      double d = 0;
      std::memcpy(&d, t.raw_data().data(), sizeof d);
      return d;
    }
  }
  return std::nullopt;
}

class Importer {
 public:
  explicit Importer(std::string path) : path_(std::move(path)) {}

  Network run() {
    parse();
    net_.sourceFile = path_;
    net_.name = std::filesystem::path(path_).stem().string();
    std::string producer = model_.producer_name();
    if (!model_.producer_version().empty())
      producer += (producer.empty() ? "" : " ") + model_.producer_version();
    if (producer.empty())
      producer = "unknown";
    net_.description = fmt::format("imported from {} (producer {})",
                                   std::filesystem::path(path_).filename().string(), producer);
    const auto& g = model_.graph();
    if (g.node_size() == 0)
      fail("graph", "the graph has no nodes");
    if (g.node_size() > kMaxNetworkLayers)
      fail("graph", fmt::format("{} nodes, over the {} layers a strata network may have",
                                g.node_size(), kMaxNetworkLayers));
    indexGraph();
    readInput();
    for (int i = 0; i < g.node_size(); ++i)
      mapNode(i);
    finish();
    return std::move(net_);
  }

 private:
  // ---- errors --------------------------------------------------------------
  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw ConfigError(path_, 0, key, message);
  }
  std::string nodeKey(int i) const {
    const auto& n = model_.graph().node(i);
    return fmt::format("nodes[{}] ({})", i, n.name().empty() ? defaultName(i) : n.name());
  }
  [[noreturn]] void failAt(int i, const std::string& message) const { fail(nodeKey(i), message); }
  std::string defaultName(int i) const {
    return fmt::format("{}_{}", model_.graph().node(i).op_type(), i);
  }
  int toInt(int i, int64_t v, const char* what) const {
    if (v <= 0 || v > std::numeric_limits<int>::max())
      failAt(i, fmt::format("{} {} is not a positive int", what, v));
    return static_cast<int>(v);
  }

  // ---- reading the file ----------------------------------------------------
  void parse() {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path_, ec))
      fail("", "no such file");
    std::ifstream in(path_, std::ios::binary);
    if (!in)
      fail("", "cannot open the file");
    if (!model_.ParseFromIstream(&in))
      fail("", "not an ONNX model (the file does not parse as an onnx.ModelProto)");
    if (!model_.has_graph())
      fail("", "the ONNX model has no graph");
  }

  // A tensor's dims bound every count computed from them: each in
  // [0, 2^31), their product at most 2^53 (what strata counts exactly).
  void checkTensor(const onnx::TensorProto& t, const std::string& key) const {
    int64_t n = 1;
    for (const auto d : t.dims())
      if (d < 0 || d > std::numeric_limits<int>::max() || !checkedMul(n, d, n, kMaxExactCount))
        fail(key, fmt::format("tensor '{}' of dims {}: each dim must be in [0, 2^31) and the "
                              "elements at most 2^53",
                              t.name(), dimsText(tensorDims(t))));
  }

  void indexGraph() {
    const auto& g = model_.graph();
    for (const auto& t : g.initializer()) {
      checkTensor(t, fmt::format("graph.initializer ({})", t.name()));
      Value v;
      v.kind = ValueKind::kConstant;
      v.tensor = &t;
      values_[t.name()] = v;
    }
    auto shapeOf = [&](const onnx::ValueInfoProto& vi) {
      if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
        graphShapes_[vi.name()] = &vi.type().tensor_type().shape();
    };
    for (const auto& vi : g.value_info())
      shapeOf(vi);
    for (const auto& vi : g.output())
      shapeOf(vi);
    // Each value has one producer: with two nodes writing one name, which
    // of them a consumer reads would be left to the order of the file.
    std::unordered_map<std::string, int> producer;
    for (int i = 0; i < g.node_size(); ++i)
      for (const auto& name : g.node(i).output()) {
        if (name.empty())
          continue;
        if (const auto [it, fresh] = producer.emplace(name, i); !fresh)
          failAt(i, it->second == i
                        ? fmt::format("writes output '{}' twice: each value of the graph has "
                                      "one producer",
                                      name)
                        : fmt::format("writes output '{}', which {} writes too: each value of "
                                      "the graph has one producer",
                                      name, nodeKey(it->second)));
        if (values_.count(name))
          failAt(i, fmt::format("writes output '{}', the name of an initializer: each value "
                                "of the graph has one producer",
                                name));
      }
    for (const auto& n : g.node())
      for (const auto& name : n.input())
        if (!name.empty())
          ++consumers_[name];
    for (const auto& o : g.output())
      ++consumers_[o.name()];
  }

  // The one graph input that is no initializer: its dims after the batch.
  void readInput() {
    const auto& g = model_.graph();
    const onnx::ValueInfoProto* input = nullptr;
    for (const auto& vi : g.input()) {
      if (values_.count(vi.name()))
        continue;  // IR < 4 lists initializers among the inputs
      if (input)
        fail("graph.input", fmt::format("inputs '{}' and '{}': a strata network has one input",
                                        input->name(), vi.name()));
      input = &vi;
    }
    if (!input)
      fail("graph.input", "the graph has no input besides its initializers");
    const std::string key = fmt::format("graph.input ({})", input->name());
    if (!input->type().has_tensor_type() || !input->type().tensor_type().has_shape())
      fail(key, "the input has no tensor shape");
    const auto& shape = input->type().tensor_type().shape();
    if (shape.dim_size() < 2 || shape.dim_size() > 4)
      fail(key, fmt::format("rank {}: strata reads a batch of vectors [N, F], sequences "
                            "[N, T, F] or images [N, C, H, W]",
                            shape.dim_size()));
    Dims per;
    for (int k = 1; k < shape.dim_size(); ++k) {
      const auto& d = shape.dim(k);
      if (!d.has_dim_value() || d.dim_value() <= 0 ||
          d.dim_value() > std::numeric_limits<int>::max())
        fail(key, fmt::format("dim {} must be a positive number; only the batch dim (0) may be "
                              "symbolic",
                              k));
      per.push_back(d.dim_value());
    }
    const int elem = input->type().tensor_type().elem_type();
    Value v;
    v.layer = -1;
    v.rank = static_cast<int>(per.size());
    if (elem == onnx::TensorProto::INT64 || elem == onnx::TensorProto::INT32) {
      if (per.size() != 1)
        fail(key, "token ids are read as [N, T]");
      v.kind = ValueKind::kTokens;
      net_.input = Shape{1, static_cast<int>(per[0]), 1};
    } else {
      net_.input = shapeOfDims(per);
    }
    if (int64_t e = 0;
        !checkedMul(int64_t{net_.input.c} * net_.input.h, net_.input.w, e, kMaxExactCount))
      fail(key, fmt::format("{} elements per example is over 2^53", dimsText(per)));
    values_[input->name()] = v;
  }

  // strata's C x H x W of ONNX per-example dims: [F] -> F x 1 x 1, [T, F] ->
  // F x T x 1 (a sequence of T vectors), [C, H, W] as they are.
  static Shape shapeOfDims(const Dims& d) {
    auto i = [](int64_t x) { return static_cast<int>(x); };
    if (d.size() == 1)
      return Shape{i(d[0]), 1, 1};
    if (d.size() == 2)
      return Shape{i(d[1]), i(d[0]), 1};
    return Shape{i(d[0]), i(d[1]), i(d[2])};
  }

  // ---- values --------------------------------------------------------------
  const Shape& shapeOf(const Value& v) const {
    return v.layer < 0 ? net_.input : net_.layers[static_cast<size_t>(v.layer)].outShape;
  }
  // The ONNX per-example dims of an activation, as strata derives them.
  Dims dimsOf(const Value& v) const {
    const Shape& s = shapeOf(v);
    if (v.flat)
      return {s.elements()};
    if (v.rank == 1)
      return {s.c};
    if (v.rank == 2)
      return {s.h, s.c};
    return {s.c, s.h, s.w};
  }

  bool hasInput(int i, int k) const {
    const auto& n = model_.graph().node(i);
    return n.input_size() > k && !n.input(k).empty();
  }
  const Value& input(int i, int k) const {
    const auto& n = model_.graph().node(i);
    if (!hasInput(i, k))
      failAt(i, fmt::format("op '{}' needs input {}", n.op_type(), k));
    auto it = values_.find(n.input(k));
    if (it == values_.end())
      failAt(i, fmt::format("input '{}' is not produced by an earlier node (or is an output "
                            "strata does not map)",
                            n.input(k)));
    return it->second;
  }
  const Value& activation(int i, int k) const {
    const Value& v = input(i, k);
    if (v.kind != ValueKind::kActivation)
      failAt(i, fmt::format("op '{}' reads '{}' as an activation; it is {}",
                            model_.graph().node(i).op_type(), model_.graph().node(i).input(k),
                            v.kind == ValueKind::kTokens ? "the token ids (only an embedding "
                                                           "Gather reads them)"
                                                         : "a constant"));
    return v;
  }
  Dims constant(int i, int k, const char* what) const {
    const Value& v = input(i, k);
    if (v.kind != ValueKind::kConstant)
      failAt(i, fmt::format("the {} '{}' must be an initializer (a weight), not computed by the "
                            "graph",
                            what, model_.graph().node(i).input(k)));
    return tensorDims(*v.tensor);
  }

  // Records output 0 of node i and checks it against the graph's shape.
  void produce(int i, Value v) {
    const auto& n = model_.graph().node(i);
    if (n.output_size() == 0 || n.output(0).empty())
      failAt(i, "the node has no output");
    const std::string& name = n.output(0);
    if (v.kind == ValueKind::kActivation)
      checkShape(i, name, v);
    values_[name] = v;
  }

  void checkShape(int i, const std::string& name, const Value& v) const {
    auto it = graphShapes_.find(name);
    if (it == graphShapes_.end())
      return;
    const auto& shape = *it->second;
    const Dims ours = dimsOf(v);
    bool agree = shape.dim_size() == static_cast<int>(ours.size()) + 1;
    std::string theirs = "[N";
    for (int k = 1; k < shape.dim_size(); ++k) {
      const auto& d = shape.dim(k);
      theirs += ", " + (d.has_dim_value() ? std::to_string(d.dim_value()) : d.dim_param());
      if (agree && d.has_dim_value() && d.dim_value() != ours[static_cast<size_t>(k - 1)])
        agree = false;
    }
    theirs += "]";
    if (!agree)
      failAt(i, fmt::format("output '{}' is {} in the graph, but strata derives [N, {}", name,
                            theirs, dimsText(ours).substr(1)));
  }

  // ---- layers --------------------------------------------------------------
  std::string layerName(int i) {
    const auto& n = model_.graph().node(i);
    std::string base = n.name().empty() ? defaultName(i) : n.name();
    std::string name = base;
    for (int k = 2; usedNames_.count(name); ++k)
      name = fmt::format("{}_{}", base, k);
    usedNames_.insert(name);
    return name;
  }

  std::vector<Shape> inputShapes(const Layer& l) const {
    std::vector<Shape> shapes;
    for (int k : l.inputs)
      shapes.push_back(k < 0 ? net_.input : net_.layers[static_cast<size_t>(k)].outShape);
    return shapes;
  }

  // deriveLayer, its errors re-keyed to the ONNX node.
  void derive(size_t index) {
    Layer& l = net_.layers[index];
    try {
      deriveLayer(l, inputShapes(l), path_, static_cast<int>(index));
    } catch (const ConfigError& e) {
      const std::string prefix = path_ + ": " + e.key() + ": ";
      std::string message = e.what();
      if (message.rfind(prefix, 0) == 0)
        message = message.substr(prefix.size());
      failAt(nodeOf_[index], message);
    }
  }

  // Appends a layer of node i reading `inputs`; returns its activation value.
  Value addLayer(int i, LayerKind kind, const LayerSpec& spec, std::vector<int> inputs, int rank) {
    Layer l;
    l.name = layerName(i);
    l.kind = kind;
    l.spec = spec;
    l.inputs = std::move(inputs);
    l.configLine = 0;
    net_.layers.push_back(std::move(l));
    nodeOf_.push_back(i);
    derive(net_.layers.size() - 1);
    Value v;
    v.layer = static_cast<int>(net_.layers.size()) - 1;
    v.rank = rank;
    return v;
  }

  Layer& layerOf(const Value& v) { return net_.layers[static_cast<size_t>(v.layer)]; }

  // ---- attributes ------------------------------------------------------------
  const onnx::AttributeProto* attr(int i, const char* name) const {
    for (const auto& a : model_.graph().node(i).attribute())
      if (a.name() == name)
        return &a;
    return nullptr;
  }
  int64_t intAttr(int i, const char* name, int64_t fallback) const {
    const auto* a = attr(i, name);
    return a ? a->i() : fallback;
  }
  std::vector<int64_t> intsAttr(int i, const char* name) const {
    const auto* a = attr(i, name);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
  }
  std::string stringAttr(int i, const char* name, const std::string& fallback) const {
    const auto* a = attr(i, name);
    return a ? a->s() : fallback;
  }

  // kernel / strides / pads / dilations of a 2-D window, as strata's one
  // stride and one symmetric pad for both dims.
  struct Window {
    int kernelH = 0, kernelW = 0, stride = 1, pad = 0;
  };
  Window window(int i, const Dims& kernel) const {
    if (kernel.size() != 2)
      failAt(i, fmt::format("kernel {}: strata maps 2-D windows only", dimsText(kernel)));
    Window w;
    w.kernelH = toInt(i, kernel[0], "kernel height");
    w.kernelW = toInt(i, kernel[1], "kernel width");
    const auto autoPad = stringAttr(i, "auto_pad", "NOTSET");
    if (autoPad != "NOTSET" && autoPad != "VALID")
      failAt(i, fmt::format("auto_pad {} cannot be mapped (strata's pad is explicit and "
                            "symmetric; export with explicit pads)",
                            autoPad));
    auto strides = intsAttr(i, "strides");
    if (strides.empty())
      strides = {1, 1};
    if (strides.size() != 2 || strides[0] != strides[1])
      failAt(i, fmt::format("strides {}: strata has one stride for both dims", dimsText(strides)));
    w.stride = toInt(i, strides[0], "stride");
    auto pads = intsAttr(i, "pads");
    if (pads.empty())
      pads = {0, 0, 0, 0};
    if (pads.size() != 4 || pads[0] != pads[1] || pads[0] != pads[2] || pads[0] != pads[3] ||
        pads[0] < 0 || pads[0] > std::numeric_limits<int>::max())
      failAt(i,
             fmt::format("pads {}: strata maps only the same pad on every side", dimsText(pads)));
    w.pad = static_cast<int>(pads[0]);
    for (auto d : intsAttr(i, "dilations"))
      if (d != 1)
        failAt(i, fmt::format("dilations {}: strata has no dilated windows",
                              dimsText(intsAttr(i, "dilations"))));
    return w;
  }

  // ---- the mapping -----------------------------------------------------------
  void mapNode(int i) {
    const auto& n = model_.graph().node(i);
    const std::string& op = n.op_type();
    const std::string& domain = n.domain();
    const bool standard = domain.empty() || domain == "ai.onnx";
    const bool microsoft = domain == "com.microsoft";
    auto unsupported = [&](const std::string& why) {
      failAt(i, fmt::format("op '{}'{} cannot be mapped to a strata layer{} (supported: {})", op,
                            standard ? "" : " (domain " + domain + ")", why, kSupported));
    };
    if (standard && op == "Identity") {
      produce(i, input(i, 0));
    } else if (standard && op == "Constant") {
      const auto* a = attr(i, "value");
      if (!a || !a->has_t())
        unsupported(": only a Constant with a tensor `value` is read");
      checkTensor(a->t(), nodeKey(i));
      Value v;
      v.kind = ValueKind::kConstant;
      v.tensor = &a->t();
      produce(i, v);
    } else if (standard && op == "Conv") {
      mapConv(i);
    } else if (standard && (op == "MaxPool" || op == "AveragePool")) {
      mapPool(i, op == "MaxPool" ? PoolMode::kMax : PoolMode::kAvg);
    } else if (standard && (op == "GlobalAveragePool" || op == "GlobalMaxPool")) {
      const Value& x = activation(i, 0);
      if (x.rank != 3 || x.flat)
        failAt(i, "a global pool reads C x H x W");
      LayerSpec s;
      s.global = true;
      s.poolMode = op == "GlobalMaxPool" ? PoolMode::kMax : PoolMode::kAvg;
      produce(i, addLayer(i, LayerKind::kPool, s, {x.layer}, 3));
    } else if ((standard && op == "Relu") || ((standard || microsoft) && op == "Gelu")) {
      const Value x = activation(i, 0);
      Value v =
          addLayer(i, op == "Relu" ? LayerKind::kRelu : LayerKind::kGelu, {}, {x.layer}, x.rank);
      v.flat = x.flat;
      produce(i, v);
    } else if (standard && op == "Dropout") {
      mapDropout(i);
    } else if (standard && op == "BatchNormalization") {
      const Value x = activation(i, 0);
      if (x.flat || x.rank == 2)
        failAt(i,
               "BatchNormalization normalises dim 1: strata maps it on C x H x W or on "
               "vectors [F]");
      const Dims scale = constant(i, 1, "scale");
      if (scale.size() != 1 || scale[0] != shapeOf(x).c)
        failAt(i, fmt::format("scale {} does not match the {} channels", dimsText(scale),
                              shapeOf(x).c));
      produce(i, addLayer(i, LayerKind::kBatchNorm, {}, {x.layer}, x.rank));
    } else if (standard && op == "LayerNormalization") {
      const Value x = activation(i, 0);
      const int64_t axis = intAttr(i, "axis", -1);
      const int64_t rank = x.rank + 1;
      if (x.flat || x.rank == 3 || (axis != -1 && axis != rank - 1))
        failAt(i, fmt::format("LayerNormalization over axis {} of a rank-{} tensor: strata "
                              "normalises the features (last axis) of vectors or sequences",
                              axis, rank));
      const Dims scale = constant(i, 1, "scale");
      if (scale.size() != 1 || scale[0] != shapeOf(x).c)
        failAt(i, fmt::format("scale {} does not match the {} features", dimsText(scale),
                              shapeOf(x).c));
      produce(i, addLayer(i, LayerKind::kLayerNorm, {}, {x.layer}, x.rank));
    } else if (standard && op == "Softmax") {
      const Value x = activation(i, 0);
      Value v = addLayer(i, LayerKind::kSoftmax, {}, {x.layer}, x.rank);
      v.flat = x.flat;
      produce(i, v);
    } else if (standard && op == "Add") {
      mapAdd(i);
    } else if (standard && op == "Flatten") {
      const Value x = activation(i, 0);
      if (intAttr(i, "axis", 1) != 1)
        failAt(i, "Flatten maps only with axis 1 (one vector per example)");
      Value v = x;
      v.flat = x.flat || x.rank > 1;
      v.rank = 1;
      produce(i, v);
    } else if (standard && op == "Reshape") {
      mapReshape(i);
    } else if (standard && op == "Gemm") {
      mapGemm(i);
    } else if (standard && op == "MatMul") {
      mapMatMul(i);
    } else if (standard && op == "Gather") {
      mapGather(i);
    } else if (microsoft && op == "Attention") {
      mapAttention(i);
    } else {
      unsupported("");
    }
  }

  void mapConv(int i) {
    const Value x = activation(i, 0);
    if (x.rank != 3 || x.flat)
      failAt(i, "Conv maps on C x H x W activations only");
    const Dims w = constant(i, 1, "weight");
    if (w.size() != 4)
      failAt(i, fmt::format("weight {}: strata maps 2-D convolutions [M, C/group, kH, kW]",
                            dimsText(w)));
    auto kernel = intsAttr(i, "kernel_shape");
    if (kernel.empty())
      kernel = {w[2], w[3]};
    if (kernel != Dims{w[2], w[3]})
      failAt(i, fmt::format("kernel_shape {} differs from the weight's {}", dimsText(kernel),
                            dimsText(w)));
    const Window win = window(i, kernel);
    LayerSpec s;
    s.filters = toInt(i, w[0], "filters");
    s.kernelH = win.kernelH;
    s.kernelW = win.kernelW;
    s.stride = win.stride;
    s.pad = win.pad;
    const int64_t group = intAttr(i, "group", 1);
    s.groups = toInt(i, group, "group");
    s.bias = hasInput(i, 2);
    if (w[1] * group != shapeOf(x).c)
      failAt(i, fmt::format("weight {} with group {} does not read the {} input channels",
                            dimsText(w), group, shapeOf(x).c));
    produce(i, addLayer(i, LayerKind::kConv, s, {x.layer}, 3));
  }

  void mapPool(int i, PoolMode mode) {
    const Value x = activation(i, 0);
    if (x.rank != 3 || x.flat)
      failAt(i, "a pool maps on C x H x W activations only");
    const Window win = window(i, intsAttr(i, "kernel_shape"));
    if (intAttr(i, "ceil_mode", 0) != 0) {
      // Accepted where rounding up gives the same size as strata's floor.
      const Shape& in = shapeOf(x);
      for (auto [size, k] : {std::pair{in.h, win.kernelH}, std::pair{in.w, win.kernelW}}) {
        const int64_t span = int64_t{size} + 2 * win.pad - k;
        if (span >= 0 && span % win.stride != 0)
          failAt(i, "ceil_mode 1 rounds this pool's output up; strata rounds down");
      }
    }
    LayerSpec s;
    s.poolMode = mode;
    s.kernelH = win.kernelH;
    s.kernelW = win.kernelW;
    s.stride = win.stride;
    s.pad = win.pad;
    produce(i, addLayer(i, LayerKind::kPool, s, {x.layer}, 3));
  }

  void mapDropout(int i) {
    const Value x = activation(i, 0);
    LayerSpec s;
    s.dropoutRate = 0.5;                     // the ONNX default
    if (const auto* a = attr(i, "ratio")) {  // before opset 12
      s.dropoutRate = a->f();
    } else if (hasInput(i, 1)) {
      const Value& r = input(i, 1);
      if (r.kind != ValueKind::kConstant)
        failAt(i, "the ratio must be a constant");
      // A ratio stored as external data is not read: the default stands (the
      // rate changes no cost).
      if (auto value = inlineScalar(*r.tensor))
        s.dropoutRate = *value;
    }
    if (!(s.dropoutRate >= 0 && s.dropoutRate < 1))
      failAt(i, fmt::format("ratio {} is not in [0, 1)", s.dropoutRate));
    Value v = addLayer(i, LayerKind::kDropout, s, {x.layer}, x.rank);
    v.flat = x.flat;
    produce(i, v);
  }

  void mapAdd(int i) {
    const Value a = input(i, 0);
    const Value b = input(i, 1);
    const auto& n = model_.graph().node(i);
    if (a.kind == ValueKind::kActivation && b.kind == ValueKind::kActivation) {
      const Dims da = dimsOf(a), db = dimsOf(b);
      if (da != db)
        failAt(i, fmt::format("Add of {} and {}: strata adds tensors of one shape (no "
                              "broadcasting)",
                              dimsText(da), dimsText(db)));
      Value v = addLayer(i, LayerKind::kAdd, {}, {a.layer, b.layer}, a.rank);
      v.flat = a.flat;
      produce(i, v);
      return;
    }
    const bool aAct = a.kind == ValueKind::kActivation;
    const Value& x = aAct ? a : b;
    const Value& other = aAct ? b : a;
    const std::string& xName = n.input(aAct ? 0 : 1);
    if (x.kind != ValueKind::kActivation ||
        (other.kind != ValueKind::kConstant && other.kind != ValueKind::kPositions))
      failAt(i,
             "Add maps for two activations, a bias after an fc, or a position table after "
             "an embedding");
    if (x.layer < 0)
      failAt(i, "Add of the network input and a constant has no strata layer");
    if (consumers_[xName] != 1)
      failAt(i, fmt::format("'{}' folds into layer '{}' only when this Add is its one reader",
                            xName, layerOf(x).name));
    Layer& l = layerOf(x);
    if (other.kind == ValueKind::kPositions) {
      // GPT-2's wte(tokens) + wpe(positions): one strata embedding.
      if (l.kind != LayerKind::kEmbedding || l.spec.positions != 0 || other.width != l.spec.outputs)
        failAt(i, fmt::format("a position table of {} x {} adds only to an embedding of {} "
                              "features without positions; '{}' is {}",
                              other.rows, other.width, other.width, l.name, toString(l.kind)));
      l.spec.positions = toInt(i, other.rows, "positions");
      derive(static_cast<size_t>(x.layer));
      produce(i, x);
      return;
    }
    // A bias: [out], or [1, ..., out].
    const Dims bias = tensorDims(*other.tensor);
    const int64_t count = elementsOf(bias);
    auto attention = attention_.find(x.layer);
    if (l.kind == LayerKind::kFc && !l.spec.bias && x.rank <= 2 && !x.flat &&
        count == l.spec.outputs && !bias.empty() && bias.back() == count) {
      l.spec.bias = true;
      derive(static_cast<size_t>(x.layer));
    } else if (attention != attention_.end() && attention->second.projection &&
               !attention->second.outputBias && count == shapeOf(x).c && !bias.empty() &&
               bias.back() == count) {
      attention->second.outputBias = true;
    } else {
      failAt(i, fmt::format("Add of '{}' and the constant {}: a constant adds only as the bias "
                            "of an fc without one (layer '{}' is {}{})",
                            xName, dimsText(bias), l.name, toString(l.kind),
                            l.kind == LayerKind::kFc && l.spec.bias ? " with a bias" : ""));
    }
    produce(i, x);
  }

  void mapReshape(int i) {
    const Value x = activation(i, 0);
    const Value& target = input(i, 1);
    const int64_t elements = shapeOf(x).elements();
    std::optional<bool> flattens;
    if (target.kind == ValueKind::kConstant) {
      if (auto t = inlineInt64s(*target.tensor)) {
        // [N or 0 or -1, elements or -1]: one vector per example.
        const auto& d = *t;
        flattens = d.size() == 2 && (d[1] == elements || (d[1] == -1 && d[0] != -1));
        if (!*flattens)
          failAt(i, fmt::format("Reshape to {} is not a flattening of {} into one vector per "
                                "example; no other reshape maps",
                                dimsText(d), dimsText(dimsOf(x))));
      }
    }
    if (!flattens) {
      // The target shape is computed or external: the graph's shape decides.
      const auto& n = model_.graph().node(i);
      auto it = graphShapes_.find(n.output(0));
      if (it == graphShapes_.end() || it->second->dim_size() != 2 ||
          !it->second->dim(1).has_dim_value() || it->second->dim(1).dim_value() != elements)
        failAt(i,
               "Reshape maps only as a flattening into one vector per example, and neither "
               "its target shape nor the graph's shape of its output says it is one");
    }
    Value v = x;
    v.flat = x.flat || x.rank > 1;
    v.rank = 1;
    produce(i, v);
  }

  void mapGemm(int i) {
    const Value x = activation(i, 0);
    if (intAttr(i, "transA", 0) != 0)
      failAt(i,
             "Gemm with transA 1 cannot be mapped (the activation is A, one row per "
             "example)");
    if (x.rank != 1)
      failAt(i, "Gemm reads one vector per example");
    const Dims w = constant(i, 1, "weight B");
    if (w.size() != 2)
      failAt(i, fmt::format("weight {} must be a matrix", dimsText(w)));
    const bool transB = intAttr(i, "transB", 0) != 0;
    const int64_t in = transB ? w[1] : w[0];
    const int64_t out = transB ? w[0] : w[1];
    if (in != shapeOf(x).elements())
      failAt(i, fmt::format("weight {} (transB {}) reads {} inputs, the activation has {}",
                            dimsText(w), transB ? 1 : 0, in, shapeOf(x).elements()));
    LayerSpec s;
    s.outputs = toInt(i, out, "outputs");
    s.flatten = true;
    s.bias = hasInput(i, 2);
    produce(i, addLayer(i, LayerKind::kFc, s, {x.layer}, 1));
  }

  void mapMatMul(int i) {
    const auto& n = model_.graph().node(i);
    const Value& a = input(i, 0);
    const Value& b = input(i, 1);
    if (a.kind == ValueKind::kActivation && b.kind == ValueKind::kActivation)
      failAt(i, fmt::format("op 'MatMul' of two activations ('{}' and '{}') cannot be mapped to a "
                            "strata layer (a decomposed attention: export the fused "
                            "com.microsoft Attention instead); only a MatMul by a weight "
                            "initializer maps, to an fc (supported: {})",
                            n.input(0), n.input(1), kSupported));
    const Value x = activation(i, 0);
    const Dims w = constant(i, 1, "weight");
    if (w.size() != 2)
      failAt(i, fmt::format("weight {} must be a matrix [in, out]", dimsText(w)));
    const Shape& in = shapeOf(x);
    // The output projection a com.microsoft Attention leaves to the next MatMul.
    if (auto at = attention_.find(x.layer); at != attention_.end() && !at->second.projection &&
                                            consumers_[n.input(0)] == 1 && w == Dims{in.c, in.c}) {
      at->second.projection = true;
      produce(i, x);
      return;
    }
    LayerSpec s;
    s.outputs = toInt(i, w[1], "outputs");
    s.bias = false;  // a following Add of a constant folds in as the bias
    if (x.rank == 1) {
      if (w[0] != in.elements())
        failAt(i, fmt::format("weight {} reads {} inputs, the activation has {}", dimsText(w), w[0],
                              in.elements()));
      s.flatten = true;
      produce(i, addLayer(i, LayerKind::kFc, s, {x.layer}, 1));
    } else if (x.rank == 2) {
      if (w[0] != in.c)
        failAt(i, fmt::format("weight {} reads {} features, the activation has {}", dimsText(w),
                              w[0], in.c));
      s.flatten = false;  // the same weights at every position
      produce(i, addLayer(i, LayerKind::kFc, s, {x.layer}, 2));
    } else {
      failAt(i, "MatMul maps on vectors [F] or sequences [T, F] only");
    }
  }

  void mapGather(int i) {
    const Dims table = constant(i, 0, "table (data)");
    if (table.size() != 2)
      failAt(i, fmt::format("Gather maps as an embedding of a [rows, features] table, got {}",
                            dimsText(table)));
    if (intAttr(i, "axis", 0) != 0)
      failAt(i, "Gather maps as an embedding only along axis 0");
    const Value& ids = input(i, 1);
    if (ids.kind == ValueKind::kTokens) {
      LayerSpec s;
      s.vocab = toInt(i, table[0], "vocabulary");
      s.outputs = toInt(i, table[1], "features");
      produce(i, addLayer(i, LayerKind::kEmbedding, s, {-1}, 2));
    } else if (ids.kind == ValueKind::kConstant) {
      Value v;
      v.kind = ValueKind::kPositions;
      v.rows = table[0];
      v.width = table[1];
      produce(i, v);
    } else {
      failAt(i,
             "Gather maps as an embedding of the network's token ids, or as a position "
             "table at constant ids");
    }
  }

  void mapAttention(int i) {
    const Value x = activation(i, 0);
    if (x.rank != 2)
      failAt(i, "Attention reads sequences [T, D]");
    const int d = shapeOf(x).c;
    const Dims w = constant(i, 1, "weights");
    if (w != Dims{d, 3 * int64_t{d}})
      failAt(i, fmt::format("weights {}: strata maps Q, K and V of the width {} ([{}, {}])",
                            dimsText(w), d, d, 3 * int64_t{d}));
    const auto& n = model_.graph().node(i);
    for (int k = 3; k < n.input_size(); ++k)
      if (!n.input(k).empty())
        failAt(i, fmt::format("input {} ('{}': mask, past or bias of the scores) cannot be "
                              "mapped",
                              k, n.input(k)));
    if (auto sizes = intsAttr(i, "qkv_hidden_sizes"); !sizes.empty() && sizes != Dims{d, d, d})
      failAt(i, fmt::format("qkv_hidden_sizes {}: strata's Q, K and V have the width {}",
                            dimsText(sizes), d));
    LayerSpec s;
    if (!attr(i, "num_heads"))
      failAt(i, "Attention needs num_heads");
    s.heads = toInt(i, intAttr(i, "num_heads", 0), "num_heads");
    s.causal = intAttr(i, "unidirectional", 0) != 0;
    s.bias = hasInput(i, 2);
    if (s.bias && elementsOf(constant(i, 2, "bias")) != 3 * int64_t{d})
      failAt(i, fmt::format("bias {} is not [{}]", dimsText(constant(i, 2, "bias")), 3 * d));
    const Value v = addLayer(i, LayerKind::kAttention, s, {x.layer}, 2);
    attention_[v.layer] = {};
    produce(i, v);
  }

  // ---- the whole network -------------------------------------------------------
  void finish() {
    const auto& g = model_.graph();
    if (net_.layers.empty())
      fail("graph", "no node maps to a strata layer");
    const int last = static_cast<int>(net_.layers.size()) - 1;
    for (const auto& [layer, state] : attention_) {
      const Layer& l = net_.layers[static_cast<size_t>(layer)];
      if (!state.projection)
        failAt(nodeOf_[static_cast<size_t>(layer)],
               "com.microsoft Attention leaves the output projection to the next node, and "
               "strata's attention includes it: its output must be read by one MatMul by a "
               "[D, D] weight");
      if (state.outputBias != l.spec.bias)
        failAt(nodeOf_[static_cast<size_t>(layer)],
               "strata's attention has biases on the QKV and the output projections or on "
               "neither; this one has one without the other");
    }
    for (int k = 0; k < last; ++k)
      if (net_.layers[static_cast<size_t>(k)].kind == LayerKind::kSoftmax)
        failAt(nodeOf_[static_cast<size_t>(k)],
               "Softmax maps to strata's loss layer, which must be the network's last layer");
    bool outputIsLast = false;
    for (const auto& o : g.output()) {
      auto it = values_.find(o.name());
      if (it == values_.end() || it->second.kind != ValueKind::kActivation)
        continue;  // a side output (BatchNormalization's running statistics)
      if (it->second.layer != last)
        fail(fmt::format("graph.output ({})", o.name()),
             fmt::format("the output is layer '{}', not the last layer '{}': a strata network "
                         "has one output, its last layer",
                         it->second.layer < 0 ? "input" : layerOf(it->second).name,
                         net_.layers.back().name));
      outputIsLast = true;
    }
    if (!outputIsLast)
      fail("graph.output",
           fmt::format("no graph output is the last layer '{}'", net_.layers.back().name));
    // Folds changed specs after their layers were derived: derive all again,
    // with the network's total checked as the YAML loader checks it.
    int64_t total = 0;
    for (size_t k = 0; k < net_.layers.size(); ++k) {
      derive(k);
      if (!checkedAdd(total, net_.layers[k].params, total, kMaxExactCount))
        failAt(nodeOf_[k], "the network's parameters overflow 2^53");
    }
    findModelParallelPart(net_);
  }

  std::string path_;
  onnx::ModelProto model_;
  Network net_;
  std::unordered_map<std::string, Value> values_;
  std::unordered_map<std::string, const onnx::TensorShapeProto*> graphShapes_;
  std::unordered_map<std::string, int> consumers_;  // readers of each value (nodes, outputs)
  std::map<int, AttentionState> attention_;         // by layer
  std::vector<int> nodeOf_;                         // the node each layer came from
  std::set<std::string> usedNames_;
};

}  // namespace

Network loadOnnxNetwork(const std::string& path) {
  return Importer(path).run();
}

}  // namespace strata
