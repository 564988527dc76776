// deltafin serve's parts below HTTP: request validation names the field at fault; the session
// cache's reuse (rewind to the common prefix, prefill the rest) gives bit-identical logits to a
// fresh prefill on K2 (append-only latent cache) and K3 (recurrent state restored by replay),
// two interleaved conversations each keep their own session, sessions beyond the state budget
// are dropped least recently used, and a dropped one is saved to the prefix cache and restored
// from it with the same logits; the admission line holds one generation and a bounded number of
// waiters.
#include <catch2/catch.hpp>

#include <deltafin/engine.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <thread>

#include "decode/generation.hpp"
#include "decode/prefix_cache.hpp"
#include "serve/admission.hpp"
#include "serve/api_error.hpp"
#include "serve/request.hpp"
#include "serve/session_cache.hpp"
#include "test_util.hpp"

using namespace deltafin;
using namespace deltafin::serve;

namespace {

// The ApiError a body is refused with.
ApiError refusal(const std::string& body, bool chat = true) {
  try {
    chat ? parse_chat_request(body) : parse_completion_request(body);
  } catch (const ApiError& e) {
    return e;
  }
  FAIL("accepted: " << body);
  return ApiError(0, "");
}

}  // namespace

TEST_CASE("serve requests: fields, defaults and refusals naming the field", "[serve]") {
  const CompletionRequest r = parse_chat_request(
      R"({"model": "m", "messages": [{"role": "developer", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
          "max_completion_tokens": 9, "top_p": 0.5, "seed": 3, "stop": "x", "stream": true, "stream_options": {"include_usage": true}, "logprobs": null})");
  CHECK(r.chat);
  CHECK(r.model == "m");
  REQUIRE(r.messages.size() == 2);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[1].content == "ab");
  CHECK(r.max_tokens == 9);
  CHECK(r.sampler.temperature == 1.0f);
  CHECK(r.sampler.top_p == 0.5f);
  CHECK(r.sampler.seed == 3);
  CHECK(r.stops == std::vector<std::string>{"x"});
  CHECK((r.stream && r.include_usage));
  CHECK(parse_completion_request(R"({"prompt": ["one"]})").prompt == "one");
  CHECK_FALSE(parse_completion_request(R"({"prompt": "p"})").max_tokens.has_value());

  CHECK(refusal("{").param.empty());
  CHECK(refusal("{").status == 400);
  CHECK(refusal(R"({"messages": []})").param == "messages");
  CHECK(refusal(R"({"messages": [{"content": "x"}]})").param == "messages[0].role");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").param == "messages[0].content[0]");
  CHECK(refusal(R"({"messages": [{"role": "user"}], "temperature": 3})").param == "temperature");
  CHECK(refusal(R"({"messages": [{"role": "user"}], "seed": -1})").param == "seed");
  CHECK(refusal(R"({"messages": [{"role": "user"}], "n": 3})").param == "n");
  CHECK(refusal(R"({"messages": [{"role": "user"}], "stop": ["a", "b", "c", "d", "e"]})").param == "stop");
  CHECK(refusal(R"({"messages": [{"role": "user"}], "stream_options": 1})").param == "stream_options");
  CHECK(refusal(R"({"prompt": 5})", false).param == "prompt");
  CHECK(refusal(R"({"prompt": ""})", false).param == "prompt");
}

TEST_CASE("serve requests: every integer field near and past INT64_MAX, negative or fractional, refused naming it", "[serve]") {
  const std::string chat = R"("messages": [{"role": "user", "content": "x"}])";
  auto chat_with = [&](const std::string& field, const std::string& value) { return "{" + chat + ", \"" + field + "\": " + value + "}"; };
  for (const std::string field : {"max_tokens", "max_completion_tokens", "seed", "top_k"}) {
    INFO(field);
    for (const std::string value : {"9223372036854775808", "18446744073709551615", "-1", "-9223372036854775808", "1.5", "1e3", "\"7\"", "true"})
      CHECK(refusal(chat_with(field, value)).param == field);
  }
  // In range they parse; the context check (http_server.cpp) compares max_tokens with the room
  // left, so INT64_MAX cannot overflow prompt + max_tokens there.
  CHECK(parse_chat_request(chat_with("max_tokens", "9223372036854775807")).max_tokens == INT64_MAX);
  CHECK(parse_chat_request(chat_with("top_k", "9223372036854775807")).sampler.top_k == INT64_MAX);
  CHECK(parse_chat_request(chat_with("seed", "9223372036854775807")).sampler.seed == uint64_t{INT64_MAX});
  for (const std::string value : {"9223372036854775807", "18446744073709551615", "0", "-1", "1.0"})
    CHECK(refusal(chat_with("n", value)).param == "n");
  CHECK(parse_chat_request(chat_with("n", "1")).messages.size() == 1);
  CHECK(refusal(chat_with("logprobs", "true")).param == "logprobs");
  CHECK(refusal(chat_with("top_logprobs", "9223372036854775807")).param == "top_logprobs");
  CHECK(parse_chat_request(chat_with("logprobs", "false")).messages.size() == 1);
  CHECK(refusal(R"({"prompt": "x", "logprobs": 18446744073709551615})", false).param == "logprobs");
  CHECK(parse_completion_request(R"({"prompt": "x", "logprobs": 0})").prompt == "x");
  std::string many = "[";
  for (int i = 0; i < 100000; ++i) many += i ? ",\"s\"" : "\"s\"";
  CHECK(refusal(chat_with("stop", many + "]")).param == "stop");
}

namespace {

// What the generation loop does: take the session (rewound to the kept prefix), prefill the rest
// in passes of 16; returns the last position's logits.
std::vector<float> prefill(SessionCache& cache, std::span<const int32_t> prompt, int64_t& kept) {
  kept = cache.take(prompt, static_cast<int64_t>(prompt.size()) + 8);
  int64_t appended = 0;
  return prefill_prompt(cache.session(), prompt, kept, 16, nullptr, nullptr, appended);
}

// A turn: the prompt prefilled, then `reply` appended as if generated, and recorded.
std::vector<float> turn(SessionCache& cache, const std::vector<int32_t>& prompt, const std::vector<int32_t>& reply,
                        int64_t& kept) {
  std::vector<float> logits = prefill(cache, prompt, kept);
  std::vector<int32_t> committed = prompt;
  committed.insert(committed.end(), reply.begin(), reply.end());
  if (!reply.empty()) cache.session().append(reply, false);
  cache.record(committed);
  return logits;
}

std::vector<int32_t> run_of(int32_t first, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> joined(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::unique_ptr<Engine> tiny_engine(const std::string& name) {
  EngineOptions o;
  o.model_dir = test::fixture(name);
  o.threads = 2;
  o.cache_gb = 0.5;
  o.positions = 4096;  // a planned state with room for a few short sessions (K3: their recurrent states)
  return Engine::open(o);
}

}  // namespace

TEST_CASE("serve session cache: reuse gives the logits of a fresh prefill", "[serve]") {
  for (const std::string name : {"k2_tiny", "k3_tiny"}) {
    INFO(name);
    auto engine = tiny_engine(name);
    const std::vector<int32_t> turn1 = run_of(5, 40);
    const std::vector<int32_t> committed = joined(turn1, run_of(100, 8));  // turn 1's prompt and its reply
    std::vector<int32_t> turn2(committed.begin(), committed.begin() + 45);  // diverges inside the reply
    turn2 = joined(turn2, run_of(150, 25));

    SessionCache kept(*engine, true, engine->summary().planned_state_bytes);
    int64_t reused = -1;
    turn(kept, turn1, run_of(100, 8), reused);
    CHECK(reused == 0);
    const std::vector<float> with_reuse = prefill(kept, turn2, reused);
    CHECK(reused == 45);

    SessionCache fresh(*engine, false, engine->summary().planned_state_bytes);
    const std::vector<float> without = prefill(fresh, turn2, reused);
    CHECK(reused == 0);
    REQUIRE(with_reuse.size() == without.size());
    CHECK(with_reuse == without);
  }
}

TEST_CASE("serve session cache: two interleaved conversations each keep their prefix", "[serve]") {
  for (const std::string name : {"k2_tiny", "k3_tiny"}) {
    INFO(name);
    auto engine = tiny_engine(name);
    const std::vector<int32_t> system = run_of(5, 30);  // both agents' system prompt
    const std::vector<int32_t> a1 = joined(system, run_of(60, 6)), b1 = joined(system, run_of(80, 7));
    const std::vector<int32_t> ra = run_of(120, 5), rb = run_of(140, 4);
    const std::vector<int32_t> a2 = joined(joined(a1, ra), run_of(200, 9)), b2 = joined(joined(b1, rb), run_of(220, 3));

    SessionCache cache(*engine, true, engine->summary().planned_state_bytes);
    int64_t kept = -1;
    turn(cache, a1, ra, kept);
    CHECK(kept == 0);
    // b1 departs inside a's first prompt: a fresh session, and a's is kept.
    turn(cache, b1, rb, kept);
    CHECK(kept == 0);
    CHECK(cache.stats().sessions == 2);
    const std::vector<float> a2_logits = prefill(cache, a2, kept);
    CHECK(kept == static_cast<int64_t>(a1.size() + ra.size()));
    cache.record(a2);
    const std::vector<float> b2_logits = prefill(cache, b2, kept);
    CHECK(kept == static_cast<int64_t>(b1.size() + rb.size()));
    const SessionCacheStats stats = cache.stats();
    CHECK(stats.hits == 2);
    CHECK(stats.positions_saved == a1.size() + ra.size() + b1.size() + rb.size());
    CHECK(stats.dropped == 0);

    // The same logits as prefilling from scratch.
    SessionCache fresh(*engine, false, engine->summary().planned_state_bytes);
    CHECK(prefill(fresh, a2, kept) == a2_logits);
    CHECK(kept == 0);
    CHECK(prefill(fresh, b2, kept) == b2_logits);

    // An edit of a later turn (it shares the first prompt) rewinds that conversation's session.
    const std::vector<int32_t> a2_edited = joined(joined(a1, ra), run_of(300, 4));
    prefill(cache, a2_edited, kept);
    CHECK(kept == static_cast<int64_t>(a1.size() + ra.size()));
    CHECK(cache.stats().sessions == 2);
  }
}

TEST_CASE("serve session cache: sessions beyond the planned state are dropped least recently used", "[serve]") {
  auto engine = tiny_engine("k2_tiny");
  const uint64_t per_position = engine->summary().state_bytes_per_position;
  // Room for two sessions of 64 positions (capacity grows by doubling, so a 40-token one holds 64).
  SessionCache cache(*engine, true, 2 * 64 * per_position);
  int64_t kept = -1;
  const std::vector<int32_t> a = run_of(5, 40), b = run_of(50, 40), c = run_of(100, 40);
  turn(cache, a, {}, kept);
  turn(cache, b, {}, kept);
  CHECK(cache.stats().sessions == 2);
  prefill(cache, joined(a, run_of(200, 2)), kept);  // a is now the most recently used
  CHECK(kept == 40);
  cache.record(joined(a, run_of(200, 2)));
  turn(cache, c, {}, kept);  // a third: b, the least recently used, goes
  CHECK(cache.stats().sessions == 2);
  CHECK(cache.stats().dropped == 1);
  CHECK(cache.stats().bytes <= cache.stats().budget_bytes);
  prefill(cache, joined(b, run_of(200, 2)), kept);
  CHECK(kept == 0);  // b was dropped; its fresh session drops a, now the least recently used
  cache.record(joined(b, run_of(200, 2)));
  CHECK(cache.stats().dropped == 2);
  prefill(cache, joined(c, run_of(210, 2)), kept);
  CHECK(kept == 40);  // c was kept
  cache.record(joined(c, run_of(210, 2)));
  // A request that may reach more positions than the others leave room for drops them all; the
  // running session is never dropped.
  kept = cache.take(joined(c, run_of(210, 4)), 1000);
  CHECK(kept == 42);
  CHECK(cache.stats().sessions == 1);
  CHECK(cache.stats().dropped == 3);
}

TEST_CASE("serve session cache: a dropped session is saved to the prefix cache and restored from it", "[serve]") {
  for (const std::string name : {"k2_tiny", "k3_tiny"}) {
    INFO(name);
    auto engine = tiny_engine(name);
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("deltafin-serve-prefix-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(dir);
    {
      PrefixCache disk(dir.string(), 1.0, *engine);
      SessionCache cache(*engine, true, 1, &disk);  // room for the running session only: the other is dropped
      const std::vector<int32_t> a1 = run_of(5, 30), ra = run_of(120, 5), b1 = run_of(60, 20);
      const std::vector<int32_t> a2 = joined(joined(a1, ra), run_of(200, 9));
      int64_t kept = -1;
      turn(cache, a1, ra, kept);
      turn(cache, b1, {}, kept);  // a is dropped (it was saved after its turn)
      CHECK(kept == 0);
      CHECK(cache.stats().dropped == 1);
      const std::vector<float> restored = prefill(cache, a2, kept);
      CHECK(kept == static_cast<int64_t>(a1.size() + ra.size()));
      CHECK(cache.stats().disk_stats.hits == 1);
      CHECK(cache.stats().disk_stats.positions_saved == a1.size() + ra.size());
      CHECK(cache.stats().hits == 0);  // (none in memory)
      SessionCache fresh(*engine, false, engine->summary().planned_state_bytes);
      CHECK(prefill(fresh, a2, kept) == restored);
    }
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("serve admission: one runs, max_waiting wait in arrival order, the rest are refused", "[serve]") {
  Admission line(1);
  auto first = line.admit();
  REQUIRE(first);
  REQUIRE(first->wait());
  auto second = line.admit();
  REQUIRE(second);
  CHECK(line.waiting() == 1);
  CHECK_FALSE(line.admit());  // full
  first.reset();              // the engine goes to the waiter
  REQUIRE(second->wait());
  CHECK(line.waiting() == 0);
  line.shut_down();
  auto late = line.admit();
  CHECK_FALSE(late);

  Admission fifo(2);
  auto a = fifo.admit();
  REQUIRE(a->wait());
  auto b = fifo.admit(), c = fifo.admit();
  REQUIRE((b && c));
  std::atomic<int> order{0};  // Catch2 assertions stay on this thread: the waiters only record
  int b_ran = 0, c_ran = 0;
  std::thread late_waiter([&] {  // waits first, arrived second
    if (c->wait()) c_ran = ++order;
    c.reset();
  });
  std::thread early_arrival([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    if (b->wait()) b_ran = ++order;
    b.reset();
  });
  a.reset();
  early_arrival.join();
  late_waiter.join();
  CHECK(b_ran == 1);
  CHECK(c_ran == 2);
}
