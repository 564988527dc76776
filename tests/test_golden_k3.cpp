// Golden tests for Kimi K3: the engine against Moonshot's release modeling code (fla kernels
// swapped for transformers' pure-torch kimi_linear functions), fixtures made by
// tools/make_golden_k3.py on the GPU machine (see tests/fixtures/README-k3.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <deltafin/engine.hpp>

#include "backend/backend.hpp"
#include "io/expert_store.hpp"
#include "model/k3_model.hpp"
#include "test_util.hpp"
#include "util/npy.hpp"

using namespace deltafin;

namespace {

struct K3Fixture {
  K3Config config;
  std::unique_ptr<WeightIndex> index;
  std::unique_ptr<ExpertTable> experts;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ExpertReader> reader;
  std::unique_ptr<ExpertStore> store;
  std::unique_ptr<K3Model> model;

  K3Fixture(const std::string& dir, int threads, uint64_t cache_bytes, const std::string& backend_name = "cpu")
      : config(load_k3_config(dir + "/config.json")), index(WeightIndex::open(dir)) {
    experts = std::make_unique<ExpertTable>(k3_expert_table(*index, config));
    backend = test::make_backend(backend_name, threads);
    reader = ExpertReader::from_shards(*index, *experts, {});
    store = std::make_unique<ExpertStore>(*backend, *index, *experts, *reader, cache_bytes);
    model = std::make_unique<K3Model>(*index, config, *backend, *store);
  }
};

// max|Δ| / max|ref| per row against Moonshot's release code (float32, pure-torch KDA): measured
// at most 3.2e-4 on hidden rows (the reference's own chunked and recurrent KDA paths disagree by
// 2.8e-4) and 9e-5 on logits, over both fixtures and every SIMD target. On CUDA (the H200) the
// hidden rows reach 6.4e-4 in the last layers (the device's expf/tanhf and sum orders differ from
// the CPU's; 13 layers of recurrent state amplify it), the logits stay within 3e-4 and the greedy
// ids are the reference's: device backends get 1e-3 on hidden rows.
constexpr double kLogitTolerance = 3e-4;
double hidden_tolerance(const std::string& backend) { return backend == "cpu" ? 6e-4 : 1e-3; }

void check_against_reference(const std::string& name, const std::string& backend) {
  const std::string dir = test::fixture(name);
  const test::Golden golden = test::read_golden(dir);
  const std::vector<int32_t> ids = golden.all();
  const NpyArray ref_logits = read_npy_f32(dir + "/logits.npy");
  const NpyArray ref_hidden = read_npy_f32(dir + "/hidden.npy");  // [layers + 3, T, hidden]
  K3Fixture f(dir, 2, 1 << 20, backend);
  const int64_t n = static_cast<int64_t>(ids.size()), vocab = f.config.vocab_size, h = f.config.hidden_size;
  REQUIRE(ref_hidden.shape == std::vector<int64_t>{f.config.num_hidden_layers + 3, n, h});

  K3State state = f.model->new_state();
  std::vector<float> logits(n * vocab);
  f.model->forward(state, ids.data(), n, 0, logits.data(), true, [&](int64_t row, const float* x, int64_t m) {
    double worst = 0;
    for (int64_t t = 0; t < m; ++t)
      worst = std::max(worst, test::relative_error(x + t * h, ref_hidden.data.data() + (row * n + t) * h, h));
    INFO(name << ": hidden row " << row << " (0 embedding, l+1 layer l, then output mix, final norm): worst " << worst);
    CHECK(worst <= hidden_tolerance(backend));
  });
  for (int64_t t = 0; t < n; ++t) {
    const double err = test::relative_error(logits.data() + t * vocab, ref_logits.data.data() + t * vocab, vocab);
    INFO(name << ": position " << t << " max|logit - ref| / max|ref| = " << err);
    CHECK(err <= kLogitTolerance);
  }
  // Greedy continuation, token by token from the prompt, equals the reference's.
  K3State decode = f.model->new_state();
  std::vector<float> last(vocab);
  f.model->forward(decode, golden.prompt.data(), static_cast<int64_t>(golden.prompt.size()), 0, last.data(), false);
  std::vector<int32_t> generated;
  for (size_t i = 0; i < golden.generated.size(); ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    generated.push_back(next);
    f.model->forward(decode, &next, 1, static_cast<int64_t>(golden.prompt.size() + i), last.data(), false);
  }
  CHECK(generated == golden.generated);
}

}  // namespace

TEST_CASE("Kimi K3 tiny (13 layers, 4 MLA, partial final AttnRes block, bf16) matches the release code", "[golden-k3]") {
  test::for_each_backend_and_target([&](const std::string& backend) { check_against_reference("k3_tiny", backend); });
}

TEST_CASE("Kimi K3 tiny with MXFP4 routed experts (3 shards) matches the release code", "[golden-k3]") {
  test::for_each_backend_and_target([&](const std::string& backend) { check_against_reference("k3_tiny_mxfp4", backend); });
}

TEST_CASE("Kimi K3: one prefill pass equals token-by-token decoding, at any thread count and cache budget",
          "[golden-k3]") {
  const std::string dir = test::fixture("k3_tiny");
  const std::vector<int32_t> ids = test::read_golden(dir).all();
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<std::string> backends = {"cpu"};
  for (const std::string& name : test::device_backends()) backends.push_back(name);
  for (const std::string& backend : backends) {
    INFO("backend " << backend);
    auto run = [&](int threads, uint64_t cache, int64_t chunk) {
      K3Fixture f(dir, threads, cache, backend);
      K3State state = f.model->new_state();
      const int64_t vocab = f.config.vocab_size;
      std::vector<float> logits(n * vocab);
      for (int64_t done = 0; done < n; done += chunk) {
        const int64_t m = std::min(chunk, n - done);
        f.model->forward(state, ids.data() + done, m, done, logits.data() + done * vocab, true);
      }
      return logits;
    };
    const auto whole = run(2, 1 << 20, n);
    for (auto [threads, cache, chunk] : {std::tuple{2, 1 << 20, int64_t{1}}, {1, 4096, int64_t{5}}, {3, 1 << 13, int64_t{7}}}) {
      const auto other = run(threads, static_cast<uint64_t>(cache), chunk);
      CHECK(std::memcmp(other.data(), whole.data(), whole.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("Kimi K3: rewinding restores the recurrent state exactly", "[golden-k3]") {
  EngineOptions o;
  o.model_dir = test::fixture("k3_tiny");
  auto engine = Engine::open(o);
  const std::vector<int32_t> ids = test::read_golden(o.model_dir).all();
  const int64_t vocab = engine->summary().vocab_size;
  const auto expected = engine->new_session()->append(ids, true);
  auto session = engine->new_session();
  // Several appends, so that some rewinds find a snapshot and others replay from the start.
  for (size_t at = 0; at < ids.size(); at += 4) session->append(std::span<const int32_t>(ids).subspan(at, 4), false);
  for (int64_t pos : {30, 17, 9, 2}) {
    session->rewind(pos);
    const auto again = session->append(std::span<const int32_t>(ids).subspan(pos), true);
    INFO("rewound to " << pos);
    REQUIRE(again.size() == (ids.size() - pos) * vocab);
    CHECK(std::memcmp(again.data(), expected.data() + pos * vocab, again.size() * sizeof(float)) == 0);
  }
  // A prefill then token-by-token decoding (no snapshots between single tokens): rewinding into
  // the decoded stretch replays from the prefill's snapshot.
  auto decoding = engine->new_session();
  decoding->append(std::span<const int32_t>(ids).first(8), false);
  for (size_t at = 8; at < ids.size(); ++at) decoding->append(std::span<const int32_t>(ids).subspan(at, 1), false);
  decoding->rewind(20);
  const auto tail = decoding->append(std::span<const int32_t>(ids).subspan(20), true);
  CHECK(std::memcmp(tail.data(), expected.data() + 20 * vocab, tail.size() * sizeof(float)) == 0);
  // A rewind a few positions past the snapshot runs no pass of its own: what the snapshot lacks is
  // replayed in the next append's pass (a verify pass's rejected guesses cost no extra read of a
  // streamed spine), and two rewinds before an append are as one. Farther, it replays at once.
  auto lazy = engine->new_session();
  lazy->append(std::span<const int32_t>(ids).first(12), false);
  lazy->append(std::span<const int32_t>(ids).subspan(12, 6), false);  // a snapshot at 12
  const uint64_t passes = engine->stats().passes;
  lazy->rewind(15);
  lazy->rewind(14);
  CHECK(lazy->position() == 14);
  CHECK(engine->stats().passes == passes);
  const auto next = lazy->append(std::span<const int32_t>(ids).subspan(14, 1), true);
  CHECK(engine->stats().passes == passes + 1);  // positions 12..14 in one pass
  REQUIRE(next.size() == static_cast<size_t>(vocab));
  CHECK(std::memcmp(next.data(), expected.data() + 14 * vocab, next.size() * sizeof(float)) == 0);
  lazy->append(std::span<const int32_t>(ids).subspan(15, 10), false);  // a snapshot at 15
  const uint64_t before_far = engine->stats().passes;
  lazy->rewind(23);
  CHECK(engine->stats().passes == before_far + 1);  // 15..22 replayed at once
  const auto far = lazy->append(std::span<const int32_t>(ids).subspan(23, 2), true);
  CHECK(engine->stats().passes == before_far + 2);
  CHECK(std::memcmp(far.data(), expected.data() + 23 * vocab, far.size() * sizeof(float)) == 0);
}

TEST_CASE("Kimi K3 through the CLI: greedy ids and logits", "[golden-k3]") {
  test::for_each_backend_and_target([&](const std::string& backend) {
    for (const char* name : {"k3_tiny", "k3_tiny_mxfp4"}) {
      const std::string dir = test::fixture(name);
      const test::Golden golden = test::read_golden(dir);
      const auto r = test::run_deltafin("run -m " + dir + " --tokens " + test::join_ids(golden.prompt, ",") +
                                        " -n 24 --temp 0 --ids --ignore-eos --chunk 3 --backend " + backend);
      INFO(r.output);
      CHECK(r.exit_code == 0);
      CHECK(r.output == test::join_ids(golden.generated, " ") + "\n");
    }
  });
}

TEST_CASE("inspect describes the real Kimi K3 from its config.json alone", "[golden-k3]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("deltafin-k3-config-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // The published K3 text_config values (docs/kimi-k3.md).
  std::string kda_layers, full_layers;
  for (int l = 1; l <= 93; ++l) {
    const bool mla = l % 4 == 0 || l == 93;
    std::string& list = mla ? full_layers : kda_layers;
    if (!list.empty()) list += ',';
    list += std::to_string(l);
  }
  std::ofstream(dir / "config.json") << R"({"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"],
    "text_config": {"model_type": "kimi_linear", "vocab_size": 163840, "hidden_size": 7168, "num_hidden_layers": 93,
    "num_attention_heads": 96, "intermediate_size": 33792, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0, "rms_norm_eps": 1e-5,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "mla_use_nope": true, "mla_use_output_gate": true, "num_experts": 896, "num_experts_per_token": 16,
    "num_shared_experts": 2, "moe_intermediate_size": 3072, "routed_expert_hidden_size": 3584,
    "latent_moe_use_norm": true, "moe_router_activation_func": "sigmoid", "moe_renormalize": true,
    "routed_scaling_factor": 1.0, "num_expert_group": 1, "topk_group": 1, "attn_res_block_size": 12,
    "tie_word_embeddings": false, "bos_token_id": 163584, "eos_token_id": 163586,
    "linear_attn_config": {"num_heads": 96, "head_dim": 128, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
      "use_full_rank_gate": true, "full_attn_layers": [)" + full_layers + R"(], "kda_layers": [)" + kda_layers + R"(]},
    "quantization_config": {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"}}})";
  const auto r = test::run_deltafin("inspect -m " + dir.string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("93 (69 KDA, 24 gated MLA; 1 dense, 92 MoE)") != std::string::npos);
  // 92 MoE layers x 16 experts x 17,547,264 bytes (the spec's MXFP4 expert) = 25.83 GB per token.
  CHECK(r.output.find("per token      25.829573 GB") != std::string::npos);
  // 2.7795 T parameters in all (spec section 2).
  CHECK(r.output.find("parameters     2779.") != std::string::npos);
  // Session state: 24 MLA layers x (512 + 64) floats a position; 69 KDA layers x (96 heads x 128 x
  // 128 state + 3 convolution windows of 3 x 12,288 channels) floats.
  CHECK(r.output.find("kv cache       55.3 KB per position (float32 latent cache); recurrent state 464.6 MB") !=
        std::string::npos);
  fs::remove_all(dir);
}
