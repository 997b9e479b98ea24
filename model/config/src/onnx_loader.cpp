// Imports an ONNX model as a strata Network (docs/onnx.md).
//
// The graph's nodes are walked in their (topological) order; each maps onto
// one strata layer, onto none (Identity, a flattening Flatten/Reshape, a bias
// Add folded into the fc before it), or is one clear error naming the node.
// Shapes and costs are strata's own (deriveLayer); where the graph states a
// value's shape, the two must agree. Only the dims of initializers are read:
// weights stored as external data are never opened.
//
// This file reads the protobuf graph (the file, initializers, the input, the
// graph's value shapes and outputs) and builds the network; onnx_ops.cpp maps
// each op (onnx_importer.h declares the Importer both share).
#include <cstring>
#include <filesystem>
#include <fstream>

#include "onnx_importer.h"
#include "strata/model/checked.h"
#include "strata/model/limits.h"
#include "strata/model/network_loader.h"

namespace strata {

namespace onnx_import {

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

std::optional<std::vector<double>> inlineFloats(const onnx::TensorProto& t) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return std::nullopt;
  const int64_t count = elementsOf(tensorDims(t));
  const auto& raw = t.raw_data();
  if (t.data_type() == onnx::TensorProto::FLOAT) {
    if (t.float_data_size() > 0)
      return std::vector<double>(t.float_data().begin(), t.float_data().end());
    if (raw.size() != static_cast<size_t>(count) * sizeof(float))
      return std::nullopt;
    std::vector<float> f(static_cast<size_t>(count));
    std::memcpy(f.data(), raw.data(), raw.size());
    return std::vector<double>(f.begin(), f.end());
  }
  if (t.data_type() == onnx::TensorProto::DOUBLE) {
    if (t.double_data_size() > 0)
      return std::vector<double>(t.double_data().begin(), t.double_data().end());
    if (raw.size() != static_cast<size_t>(count) * sizeof(double))
      return std::nullopt;
    std::vector<double> v(static_cast<size_t>(count));
    std::memcpy(v.data(), raw.data(), raw.size());
    return v;
  }
  return std::nullopt;
}

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

Network Importer::run() {
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

void Importer::parse() {
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
void Importer::checkTensor(const onnx::TensorProto& t, const std::string& key) const {
  int64_t n = 1;
  for (const auto d : t.dims())
    if (d < 0 || d > std::numeric_limits<int>::max() || !checkedMul(n, d, n, kMaxExactCount))
      fail(key, fmt::format("tensor '{}' of dims {}: each dim must be in [0, 2^31) and the "
                            "elements at most 2^53",
                            t.name(), dimsText(tensorDims(t))));
}

void Importer::indexGraph() {
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
void Importer::readInput() {
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
    if (!d.has_dim_value() || d.dim_value() <= 0 || d.dim_value() > std::numeric_limits<int>::max())
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
Shape Importer::shapeOfDims(const Dims& d) {
  auto i = [](int64_t x) { return static_cast<int>(x); };
  if (d.size() == 1)
    return Shape{i(d[0]), 1, 1};
  if (d.size() == 2)
    return Shape{i(d[1]), i(d[0]), 1};
  return Shape{i(d[0]), i(d[1]), i(d[2])};
}

// Records output 0 of node i and checks it against the graph's shape.
void Importer::produce(int i, Value v) {
  const auto& n = model_.graph().node(i);
  if (n.output_size() == 0 || n.output(0).empty())
    failAt(i, "the node has no output");
  const std::string& name = n.output(0);
  if (v.kind == ValueKind::kActivation)
    checkShape(i, name, v);
  values_[name] = v;
}

void Importer::checkShape(int i, const std::string& name, const Value& v) const {
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
    failAt(i, fmt::format("output '{}' is {} in the graph, but strata derives [N, {}", name, theirs,
                          dimsText(ours).substr(1)));
}

std::string Importer::layerName(int i) {
  const auto& n = model_.graph().node(i);
  std::string base = n.name().empty() ? defaultName(i) : n.name();
  std::string name = base;
  for (int k = 2; usedNames_.count(name); ++k)
    name = fmt::format("{}_{}", base, k);
  usedNames_.insert(name);
  return name;
}

std::vector<Shape> Importer::inputShapes(const Layer& l) const {
  std::vector<Shape> shapes;
  for (int k : l.inputs)
    shapes.push_back(k < 0 ? net_.input : net_.layers[static_cast<size_t>(k)].outShape);
  return shapes;
}

// deriveLayer, its errors re-keyed to the ONNX node.
void Importer::derive(size_t index) {
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
Value Importer::addLayer(int i, LayerKind kind, const LayerSpec& spec, std::vector<int> inputs,
                         int rank) {
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

Importer::Window Importer::window(int i, const Dims& kernel) const {
  if (kernel.size() != 2)
    failAt(i, fmt::format("kernel {}: strata maps 2-D windows only", dimsText(kernel)));
  Window w;
  w.kernelH = toInt(i, kernel[0], "kernel height");
  w.kernelW = toInt(i, kernel[1], "kernel width");
  const auto autoPad = stringAttr(i, "auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID")
    failAt(i, fmt::format("auto_pad {} cannot be mapped (strata's pads are explicit and "
                          "the same on opposite sides; export with explicit pads)",
                          autoPad));
  auto strides = intsAttr(i, "strides");
  if (strides.empty())
    strides = {1, 1};
  if (strides.size() != 2 || strides[0] != strides[1])
    failAt(i, fmt::format("strides {}: strata has one stride for both dims", dimsText(strides)));
  w.stride = toInt(i, strides[0], "stride");
  // pads [top, left, bottom, right]: strata pads rows above and below alike,
  // and columns left and right alike (a conv's two may differ).
  auto pads = intsAttr(i, "pads");
  if (pads.empty())
    pads = {0, 0, 0, 0};
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3] || pads[0] < 0 || pads[1] < 0 ||
      pads[0] > std::numeric_limits<int>::max() || pads[1] > std::numeric_limits<int>::max())
    failAt(i, fmt::format("pads {}: strata pads the top and bottom alike and the left and right "
                          "alike",
                          dimsText(pads)));
  w.pad = static_cast<int>(pads[0]);
  w.padW = static_cast<int>(pads[1]);
  auto dilations = intsAttr(i, "dilations");
  if (dilations.empty())
    dilations = {1, 1};
  if (dilations.size() != 2 || dilations[0] != dilations[1])
    failAt(i,
           fmt::format("dilations {}: strata has one dilation for both dims", dimsText(dilations)));
  w.dilation = toInt(i, dilations[0], "dilation");
  return w;
}

void Importer::finish() {
  const auto& g = model_.graph();
  // An element-wise chain that is a graph output becomes its layer now.
  for (const auto& o : g.output())
    if (auto it = values_.find(o.name());
        it != values_.end() && it->second.kind == ValueKind::kPointwise)
      materialize(o.name(), it->second.node);
  if (net_.layers.empty())
    fail("graph", "no node maps to a strata layer");
  const int last = static_cast<int>(net_.layers.size()) - 1;
  for (const auto& [layer, state] : attention_) {
    Layer& l = net_.layers[static_cast<size_t>(layer)];
    if (!state.projection && state.slices != 0)
      failAt(nodeOf_[static_cast<size_t>(layer)],
             fmt::format("'{}' is sliced into the Q, K and V of an attention that reaches no "
                         "output projection (a Gemm or MatMul of its context by a [D, D] weight)",
                         state.sliced));
    if (!state.projection && state.keys >= 0)
      failAt(nodeOf_[static_cast<size_t>(layer)],
             fmt::format("'{}' is the Q projection of an attention that reaches no output "
                         "projection (a MatMul of its context by a [D, D] weight)",
                         l.name));
    if (!state.projection)
      failAt(nodeOf_[static_cast<size_t>(layer)],
             "com.microsoft Attention leaves the output projection to the next node, and "
             "strata's attention includes it: its output must be read by one MatMul by a "
             "[D, D] weight");
    // Biases on Q, K and V alone, none on the output projection: Qwen2's
    // attention (qkv_bias).
    if (l.spec.bias && !state.outputBias) {
      l.spec.bias = false;
      l.spec.qkvBias = true;
    }
    if (state.outputBias != l.spec.bias)
      failAt(nodeOf_[static_cast<size_t>(layer)],
             "strata's attention has biases on the QKV and the output projections, on neither, "
             "or on Q, K and V alone (Qwen2); this one has one on the output projection alone");
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
  // A SwiGLU's gate fc holds the up projection's rows too: the swiglu must
  // be its one reader.
  for (const auto& [gate, swiglu] : swiglus_)
    for (size_t k = 0; k < net_.layers.size(); ++k)
      if (static_cast<int>(k) != swiglu &&
          std::count(net_.layers[k].inputs.begin(), net_.layers[k].inputs.end(), gate) > 0)
        failAt(nodeOf_[k], fmt::format("reads '{}', the gate of a SwiGLU that strata folds "
                                       "with its up projection into one fc",
                                       net_.layers[static_cast<size_t>(gate)].name));
  dropAbsorbedLayers();
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

// The K and V fcs of attentions folded from separate projections, and the
// up fcs of SwiGLUs, hold parameters the attention layer (the gate's fc)
// now counts: they leave the network, and every layer index after them
// moves down.
void Importer::dropAbsorbedLayers() {
  std::vector<bool> drop(net_.layers.size(), false);
  for (int k : absorbed_)
    drop[static_cast<size_t>(k)] = true;
  std::vector<int> index(net_.layers.size(), -1);
  std::vector<Layer> kept;
  std::vector<int> keptNodes;
  for (size_t k = 0; k < net_.layers.size(); ++k) {
    if (drop[k])
      continue;
    index[k] = static_cast<int>(kept.size());
    kept.push_back(std::move(net_.layers[k]));
    keptNodes.push_back(nodeOf_[k]);
  }
  auto moved = [&](int k, size_t reader) {
    if (k < 0)
      return k;
    if (index[static_cast<size_t>(k)] < 0)  // its readers were checked when it was absorbed
      failAt(keptNodes[reader],
             "reads a projection folded into an attention (K, V) or a SwiGLU "
             "(its up projection)");
    return index[static_cast<size_t>(k)];
  };
  for (size_t k = 0; k < kept.size(); ++k) {
    for (int& in : kept[k].inputs)
      in = moved(in, k);
    kept[k].spec.tiedTo = moved(kept[k].spec.tiedTo, k);
  }
  net_.layers = std::move(kept);
  nodeOf_ = std::move(keptNodes);
}
}  // namespace onnx_import

Network loadOnnxNetwork(const std::string& path) {
  return onnx_import::Importer(path).run();
}

}  // namespace strata
