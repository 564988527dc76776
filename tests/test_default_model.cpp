// The bundled default model (models/default, trained by tools/train_default_model.py) against
// transformers on the same weights with the INT4 experts dequantized (models/default/golden/),
// and `deltafin run` with no -m finding it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include <deltafin/engine.hpp>

#include "test_util.hpp"
#include "text/tokenizer.hpp"
#include "util/npy.hpp"

using namespace deltafin;

namespace {

const std::string kModel = deltafin::test::fixtures_dir() + "/../../models/default";

}  // namespace

TEST_CASE("the bundled model: tokenizer, logits and greedy continuation match transformers", "[golden]") {
  test::for_each_backend_and_target([&](const std::string& backend) {
    simdjson::dom::parser parser;
    const simdjson::dom::element golden = parser.load(kModel + "/golden/golden.json");
    const test::Golden g = test::read_golden(kModel + "/golden");
    const std::string_view prompt_text = golden["prompt_text"].get_string();
    CHECK(load_tokenizer(kModel)->encode(prompt_text, false) == g.prompt);

    EngineOptions o;
    o.model_dir = kModel;
    o.backend = backend;
    auto engine = Engine::open(o);
    const std::vector<int32_t> ids = g.all();
    const std::vector<float> logits = engine->new_session()->append(ids, true);
    const NpyArray ref = read_npy_f32(kModel + "/golden/logits.npy");
    const int64_t vocab = engine->summary().vocab_size;
    REQUIRE(ref.shape == std::vector<int64_t>{static_cast<int64_t>(ids.size()), vocab});
    for (size_t t = 0; t < ids.size(); ++t) {
      const double err = test::relative_error(logits.data() + t * vocab, ref.data.data() + t * vocab, vocab);
      INFO("position " << t << ": " << err);
      CHECK(err <= 1e-5);  // measured at most 1.0e-6 on every SIMD target
    }
    // `deltafin run` without -m uses the bundled model.
    const auto r = test::run_deltafin("run --tokens " + test::join_ids(g.prompt, ",") + " -n 24 --temp 0 --ids --ignore-eos --backend " + backend);
    INFO(r.output);
    CHECK(r.output == test::join_ids(g.generated, " ") + "\n");
  });
}
