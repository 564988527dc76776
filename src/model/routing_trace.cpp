// RoutingRecorder and the routing-trace reader (see routing_trace.hpp, docs/routing-traces.md).
#include "model/routing_trace.hpp"

#include <cstring>

#include "util/error.hpp"
#include "util/input_file.hpp"
#include "util/json_value.hpp"

namespace deltafin {
namespace {

constexpr std::string_view kMagic = "DFROUTE1";

template <class T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (every target we build)
  out.append(bytes, sizeof(T));
}

JsonValue header_json(const RoutingTraceHeader& h) {
  std::vector<JsonValue> moe;
  for (int64_t l : h.moe_layers) moe.push_back(JsonValue::integer(l));
  return JsonValue::object({{"format", JsonValue::string("deltafin-routing-trace")},
                            {"version", JsonValue::integer(1)},
                            {"model", JsonValue::string(h.model)},
                            {"layers", JsonValue::integer(h.layers)},
                            {"moe_layers", JsonValue::array(std::move(moe))},
                            {"experts", JsonValue::integer(h.experts)},
                            {"top_k", JsonValue::integer(h.top_k)},
                            {"record_bytes", JsonValue::integer(static_cast<int64_t>(h.record_bytes))},
                            {"slot_bytes", JsonValue::integer(static_cast<int64_t>(h.slot_bytes))},
                            {"source", JsonValue::string(h.source)},
                            {"label", JsonValue::string(h.label)}});
}

// Reads the trace's bytes in order; every failure names the file and the offset.
class Cursor {
 public:
  Cursor(std::string_view bytes, const std::string& name) : bytes_(bytes), name_(name) {}
  template <class T>
  T get(const char* what) {
    if (bytes_.size() - at_ < sizeof(T)) bad("ends inside {}", what);
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string_view take(size_t n, const char* what) {
    if (bytes_.size() - at_ < n) bad("ends inside {}", what);
    const std::string_view s = bytes_.substr(at_, n);
    at_ += n;
    return s;
  }
  size_t at() const { return at_; }
  bool done() const { return at_ == bytes_.size(); }
  template <class... A>
  [[noreturn]] void bad(fmt::format_string<A...> f, A&&... a) const {
    fail("{}: routing trace {} (at byte {})", name_, fmt::format(f, std::forward<A>(a)...), at_);
  }

 private:
  std::string_view bytes_;
  const std::string& name_;
  size_t at_ = 0;
};

int64_t header_integer(const JsonValue& h, const char* key, const Cursor& c, int64_t low, int64_t high) {
  const JsonValue* v = h.find(key);
  if (!v || v->type() != JsonValue::Type::Integer || v->as_integer() < low || v->as_integer() > high)
    c.bad("header: '{}' must be an integer in {}..{}", key, low, high);
  return v->as_integer();
}

std::string header_string(const JsonValue& h, const char* key, const Cursor& c) {
  const JsonValue* v = h.find(key);
  if (!v || !v->is_string()) c.bad("header: '{}' must be a string", key);
  return v->as_string();
}

RoutingTraceHeader parse_header(Cursor& c) {
  const uint32_t length = c.get<uint32_t>("the header length");
  const std::string_view text = c.take(length, "the header");
  JsonValue h;
  try {
    h = parse_json(text);
  } catch (const Error& e) {
    c.bad("header is not JSON: {}", e.what());
  }
  if (!h.is_object()) c.bad("header is not a JSON object");
  if (header_string(h, "format", c) != "deltafin-routing-trace") c.bad("header: format is not 'deltafin-routing-trace'");
  if (header_integer(h, "version", c, 1, 1000) != 1) c.bad("header: version {} is not 1", h.find("version")->as_integer());
  RoutingTraceHeader out;
  out.model = header_string(h, "model", c);
  out.layers = header_integer(h, "layers", c, 1, 65535);
  out.experts = header_integer(h, "experts", c, 1, 65536);
  out.top_k = header_integer(h, "top_k", c, 1, out.experts);
  out.record_bytes = static_cast<uint64_t>(header_integer(h, "record_bytes", c, 1, int64_t{1} << 40));
  out.slot_bytes = static_cast<uint64_t>(header_integer(h, "slot_bytes", c, static_cast<int64_t>(out.record_bytes), int64_t{1} << 40));
  out.source = header_string(h, "source", c);
  if (out.source != "recorded" && out.source != "synthetic") c.bad("header: source must be 'recorded' or 'synthetic'");
  out.label = header_string(h, "label", c);
  const JsonValue* moe = h.find("moe_layers");
  if (!moe || !moe->is_array() || moe->items().empty()) c.bad("header: 'moe_layers' must be a non-empty array");
  for (const JsonValue& l : moe->items()) {
    if (l.type() != JsonValue::Type::Integer || l.as_integer() < 0 || l.as_integer() >= out.layers ||
        (!out.moe_layers.empty() && l.as_integer() <= out.moe_layers.back()))
      c.bad("header: 'moe_layers' must be ascending layer numbers below {}", out.layers);
    out.moe_layers.push_back(l.as_integer());
  }
  return out;
}

}  // namespace

RoutingRecorder::RoutingRecorder(RoutingTraceHeader header) : header_(std::move(header)) {}

void RoutingRecorder::pass(int64_t start, int64_t n) {
  events_.push_back('P');
  put(events_, static_cast<uint8_t>(kind_));
  put(events_, start);
  put(events_, static_cast<uint32_t>(n));
}

void RoutingRecorder::layer(int64_t layer, std::span<const int32_t> chosen) {
  events_.push_back('L');
  put(events_, static_cast<uint16_t>(layer));
  for (int32_t id : chosen) put(events_, static_cast<uint16_t>(id));
}

void RoutingRecorder::rewind(int64_t position) {
  events_.push_back('R');
  put(events_, position);
}

std::string RoutingRecorder::bytes() const {
  const std::string header = write_json(header_json(header_), {.compact = true});
  std::string out(kMagic);
  put(out, static_cast<uint32_t>(header.size()));
  out += header;
  out += events_;
  out.push_back('E');
  return out;
}

RoutingTrace parse_routing_trace(std::string_view bytes, const std::string& name) {
  Cursor c(bytes, name);
  if (c.take(std::min(bytes.size(), kMagic.size()), "the magic") != kMagic) fail("{}: not a routing trace (no DFROUTE1 magic)", name);
  RoutingTrace trace;
  trace.header = parse_header(c);
  const RoutingTraceHeader& h = trace.header;
  size_t layer_index = h.moe_layers.size();  // the next MoE layer the current pass expects
  for (;;) {
    const char tag = c.get<char>("an event tag");
    if (tag == 'E') break;
    if (tag == 'P') {
      if (layer_index < h.moe_layers.size()) c.bad("a pass starts before the last one reached layer {}", h.moe_layers[layer_index]);
      RoutingPass p;
      const uint8_t kind = c.get<uint8_t>("a pass kind");
      if (kind > 2) c.bad("pass kind {} is not 0, 1 or 2", kind);
      p.kind = static_cast<PassKind>(kind);
      p.start = c.get<int64_t>("a pass start");
      p.n = c.get<uint32_t>("a pass width");
      if (p.start < 0 || p.n < 1) c.bad("a pass over positions {}+{} is empty or negative", p.start, p.n);
      trace.passes.push_back(std::move(p));
      layer_index = 0;
    } else if (tag == 'L') {
      if (layer_index >= h.moe_layers.size()) c.bad("a layer event outside a pass");
      const uint16_t layer = c.get<uint16_t>("a layer number");
      if (layer != h.moe_layers[layer_index]) c.bad("layer {} where layer {} comes next", layer, h.moe_layers[layer_index]);
      RoutingPass& p = trace.passes.back();
      const int64_t count = p.n * h.top_k;
      if (static_cast<uint64_t>(count) * 2 > bytes.size()) c.bad("a layer of {} ids is longer than the file", count);
      std::vector<uint16_t>& ids = p.layers.emplace_back(static_cast<size_t>(count));
      for (uint16_t& id : ids) {
        id = c.get<uint16_t>("a layer's ids");
        if (id >= h.experts) c.bad("expert id {} at layer {} is not below {}", id, layer, h.experts);
      }
      ++layer_index;
    } else if (tag == 'R') {
      if (trace.passes.empty() || layer_index < h.moe_layers.size()) c.bad("a rewind outside a finished pass");
      const int64_t position = c.get<int64_t>("a rewind position");
      if (position < 0) c.bad("rewind to negative position {}", position);
      trace.passes.back().rewinds.push_back(position);
    } else {
      c.bad("unknown event tag 0x{:02x}", static_cast<uint8_t>(tag));
    }
  }
  if (layer_index < h.moe_layers.size()) c.bad("ends inside a pass (layer {} missing)", h.moe_layers[layer_index]);
  if (!c.done()) c.bad("has bytes after its end event");
  return trace;
}

std::string routing_trace_bytes(const RoutingTrace& trace) {
  RoutingRecorder r(trace.header);
  for (const RoutingPass& p : trace.passes) {
    r.set_kind(p.kind);
    r.pass(p.start, p.n);
    for (size_t i = 0; i < p.layers.size(); ++i) {
      const std::vector<int32_t> ids(p.layers[i].begin(), p.layers[i].end());
      r.layer(trace.header.moe_layers[i], ids);
    }
    for (int64_t position : p.rewinds) r.rewind(position);
  }
  return r.bytes();
}

RoutingTrace read_routing_trace(const std::string& path) {
  return parse_routing_trace(read_input_file(path, "routing trace"), path);
}

}  // namespace deltafin
