// Routing traces (model/routing_trace.hpp): the recorder's bytes read back exactly; malformed
// files refused in one line naming the file and byte offset. The cache simulator
// (io/cache_simulator.hpp) on hand-made traces whose hits and reads follow from the policy's
// rules by hand; that it equals the engine's receipt is tests/cache_sim/receipt_match.sh.
#include <catch2/catch.hpp>

#include <cstring>

#include "io/cache_simulator.hpp"
#include "model/routing_trace.hpp"
#include "util/error.hpp"

using namespace deltafin;
using Catch::Contains;

namespace {

RoutingTraceHeader small_header() {
  RoutingTraceHeader h;
  h.model = "test";
  h.layers = 3;
  h.moe_layers = {1, 2};
  h.experts = 8;
  h.top_k = 2;
  h.record_bytes = 1000;
  h.slot_bytes = 4096;
  h.label = "hand-made";
  return h;
}

// Decode passes at positions 0.., each with its ids at the two MoE layers.
RoutingTrace decode_trace(const std::vector<std::vector<std::vector<uint16_t>>>& tokens) {
  RoutingTrace t{small_header(), {}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    RoutingPass p;
    p.kind = PassKind::Decode;
    p.start = static_cast<int64_t>(i);
    p.n = 1;
    p.layers = tokens[i];
    t.passes.push_back(p);
  }
  return t;
}

// The same ids at both layers.
RoutingTrace decode_trace(const std::vector<std::vector<uint16_t>>& tokens) {
  std::vector<std::vector<std::vector<uint16_t>>> both;
  for (const auto& ids : tokens) both.push_back({ids, ids});
  return decode_trace(both);
}

std::string error_of(const std::string& bytes) {
  try {
    parse_routing_trace(bytes, "bad.trace");
  } catch (const Error& e) {
    return e.what();
  }
  return "parsed";
}

}  // namespace

TEST_CASE("a recorded routing trace reads back as it was written", "[routing-trace]") {
  RoutingRecorder r(small_header());
  r.set_kind(PassKind::Prefill);
  r.pass(0, 2);
  r.layer(1, std::vector<int32_t>{0, 1, 2, 3});
  r.layer(2, std::vector<int32_t>{4, 5, 6, 7});
  r.set_kind(PassKind::Verify);
  r.pass(2, 3);
  r.layer(1, std::vector<int32_t>{0, 1, 0, 2, 7, 6});
  r.layer(2, std::vector<int32_t>{1, 0, 3, 2, 5, 4});
  r.rewind(3);
  const std::string bytes = r.bytes();
  REQUIRE(bytes.substr(0, 8) == "DFROUTE1");
  const RoutingTrace t = parse_routing_trace(bytes, "t");
  CHECK(t.header.model == "test");
  CHECK(t.header.moe_layers == std::vector<int64_t>{1, 2});
  CHECK(t.header.record_bytes == 1000);
  CHECK(t.header.source == "recorded");
  REQUIRE(t.passes.size() == 2);
  CHECK(t.passes[0].kind == PassKind::Prefill);
  CHECK(t.passes[1].kind == PassKind::Verify);
  CHECK(t.passes[1].start == 2);
  CHECK(t.passes[1].n == 3);
  CHECK(t.passes[1].layers[0] == std::vector<uint16_t>{0, 1, 0, 2, 7, 6});
  CHECK(t.passes[1].rewinds == std::vector<int64_t>{3});
  CHECK(routing_trace_bytes(t) == bytes);
}

TEST_CASE("malformed routing traces are refused naming the file and the offset", "[routing-trace]") {
  RoutingRecorder r(small_header());
  r.pass(0, 1);
  r.layer(1, std::vector<int32_t>{0, 1});
  r.layer(2, std::vector<int32_t>{2, 3});
  const std::string good = r.bytes();
  CHECK(error_of(good) == "parsed");
  CHECK_THAT(error_of("GIF89a"), Contains("bad.trace") && Contains("not a routing trace"));
  CHECK_THAT(error_of(good.substr(0, good.size() - 1)), Contains("bad.trace") && Contains("ends inside an event tag"));
  CHECK_THAT(error_of(good.substr(0, good.size() - 4)), Contains("ends inside a layer's ids"));
  CHECK_THAT(error_of(good + "x"), Contains("bytes after its end event"));
  std::string bad_id = good;
  bad_id[bad_id.size() - 3] = 9;  // the last id (little-endian u16) = 9 of 8 experts
  CHECK_THAT(error_of(bad_id), Contains("expert id 9 at layer 2 is not below 8") && Contains("(at byte"));
  std::string bad_tag = good;
  bad_tag[bad_tag.size() - 1] = 'Z';
  CHECK_THAT(error_of(bad_tag), Contains("unknown event tag 0x5a"));
  std::string bad_header = good;
  const size_t at = bad_header.find("\"top_k\":2");
  bad_header.replace(at, 9, "\"top_k\":0");
  CHECK_THAT(error_of(bad_header), Contains("'top_k' must be an integer in 1..8"));
  const size_t end = good.size() - 1;
  std::string skipped_layer = good.substr(0, end - 7) + "E";  // the pass lacks its layer-2 event (1 + 2 + 2 x 2 bytes)
  CHECK_THAT(error_of(skipped_layer), Contains("ends inside a pass (layer 2 missing)"));
  const size_t events = good.size() - (1 + 1 + 8 + 4) - 2 * 7 - 1;  // where the first pass starts
  CHECK_THAT(error_of(std::string(good).insert(events, std::string("R\0\0\0\0\0\0\0\0", 9))),
             Contains("a rewind outside a finished pass"));
}

TEST_CASE("the cache simulator counts hits and reads by the policy's rules", "[routing-trace]") {
  // Two MoE layers, top-2, slots of 4096 bytes.
  CacheSimOptions o;
  SECTION("everything fits: each expert read once") {
    o.budget_bytes = 16 * 4096;
    const CacheSimResult r = simulate_cache(decode_trace({{0, 1}, {1, 2}, {0, 1}}), o);
    CHECK(r.misses == 6);  // {0,1,2} at each of the two layers
    CHECK(r.hits == 6);
    CHECK(r.bytes_read == 6000);
    CHECK(r.decode_positions == 3);
  }
  SECTION("two slots: the layer that runs next keeps nothing of the one that ran") {
    o.budget_bytes = 2 * 4096;
    const CacheSimResult r = simulate_cache(decode_trace({{0, 1}, {0, 1}}), o);
    CHECK(r.hits == 0);
    CHECK(r.misses == 8);
  }
  SECTION("five slots: layer 1's experts survive layer 2 when one slot is spare") {
    o.budget_bytes = 5 * 4096;
    const CacheSimResult r = simulate_cache(decode_trace({{0, 1}, {0, 1}}), o);
    CHECK(r.hits == 4);
    CHECK(r.misses == 4);
  }
  SECTION("a rewind makes the dropped positions' experts go first") {
    o.budget_bytes = 6 * 4096;
    // Position 1 chooses {2,3} at layer 1 and {0,1} at layer 2. Position 2 needs {4,5} at layer
    // 2: two slots. Kept, position 1 was the last to use layer 1's {2,3}, which come back sooner
    // than layer 2's {0,1}: layer 2's go, and position 3 finds all four. Rejected, every expert
    // position 1 chose is cold and goes first, least recently requested first: layer 1's {2,3},
    // which position 3 then reads again.
    RoutingTrace t = decode_trace({{{0, 1}, {0, 1}}, {{2, 3}, {0, 1}}, {{0, 1}, {4, 5}}, {{2, 3}, {4, 5}}});
    CHECK(simulate_cache(t, o).hits == 2 + 2 + 4);
    t.passes[1].rewinds = {1};
    CHECK(simulate_cache(t, o).hits == 2 + 2 + 2);
  }
  SECTION("speculation regroups decode passes: each layer's union read once per verify pass") {
    o.budget_bytes = 2 * 4096;
    o.verify_width = 2;
    const CacheSimResult r = simulate_cache(decode_trace({{0, 1}, {0, 1}}), o);
    CHECK(r.passes == 1);
    CHECK(r.misses == 4);
    CHECK(r.decode_positions == 2);
  }
  SECTION("a budget below one expert is refused") {
    o.budget_bytes = 100;
    CHECK_THROWS_WITH(simulate_cache(decode_trace({{0, 1}}), o), Contains("cannot hold one expert"));
  }
}
