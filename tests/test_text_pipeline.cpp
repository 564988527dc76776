// The text pipeline around the tokenizers: streaming UTF-8 decoding (checked against Python's
// bytes.decode("utf-8", "replace") outputs), stop strings, chat rendering, and sampling filters.
#include <catch2/catch.hpp>

#include <cmath>

#include "decode/sampler.hpp"
#include "text/chat_format.hpp"
#include "text/stop_strings.hpp"
#include "text/utf8_stream.hpp"

using namespace deltafin;

namespace {

std::string stream_bytewise(const std::string& bytes) {
  Utf8Stream s;
  std::string out;
  for (char c : bytes) out += s.push(std::string_view(&c, 1));
  return out + s.finish();
}

const std::string R = "\xEF\xBF\xBD";  // U+FFFD

// A tokenizer whose specials are a fixed list and whose text tokens are single bytes.
class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(std::vector<std::string> specials) : specials_(std::move(specials)) {}
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string token_bytes(int32_t id) const override {
    return id < 256 ? std::string(1, static_cast<char>(id)) : specials_.at(id - 256);
  }
  std::optional<int32_t> special_id(std::string_view text) const override {
    for (size_t i = 0; i < specials_.size(); ++i)
      if (specials_[i] == text) return static_cast<int32_t>(256 + i);
    return std::nullopt;
  }
  int32_t vocab_size() const override { return 256 + static_cast<int32_t>(specials_.size()); }

 private:
  std::vector<std::string> specials_;
};

std::string rendered(const Tokenizer& t, const std::vector<int32_t>& ids) { return t.decode(ids); }

}  // namespace

TEST_CASE("streaming UTF-8 never splits a character and replaces like Python", "[text]") {
  // Expected values are what CPython's bytes.decode("utf-8", "replace") returns.
  CHECK(stream_bytewise("h\xC3\xA9llo \xF0\x9F\x98\x80!") == "h\xC3\xA9llo \xF0\x9F\x98\x80!");
  CHECK(stream_bytewise("\xE4\xBD" "A") == R + "A");
  CHECK(stream_bytewise("\xFF\xFE") == R + R);
  CHECK(stream_bytewise("\xED\xA0\x80") == R + R + R);      // a UTF-16 surrogate
  CHECK(stream_bytewise("\xC0\xAF") == R + R);              // overlong
  CHECK(stream_bytewise("ok\xF0\x9F\x98") == "ok" + R);     // cut off at the end
  CHECK(stream_bytewise("\xF4\x90\x80\x80") == R + R + R + R);  // above U+10FFFF
  CHECK(stream_bytewise("\xE2\x28\xA1") == R + "(" + R);
  Utf8Stream s;
  CHECK(s.push("\xF0\x9F") == "");
  CHECK(s.push("\x98") == "");
  CHECK(s.push("\x80x") == "\xF0\x9F\x98\x80x");
}

TEST_CASE("stop strings end the output and are not printed", "[text]") {
  StopStrings s({"\n\n", "END"});
  std::string out = s.push("abc E");
  out += s.push("N");
  CHECK(out == "abc ");  // "EN" is held back: it may become "END"
  out += s.push("X more");
  CHECK(out == "abc ENX more");
  out += s.push("\n");
  out += s.push("\nignored");
  CHECK(s.stopped());
  out += s.push("after");
  out += s.finish();
  CHECK(out == "abc ENX more");
  StopStrings none({});
  CHECK(none.push("text") == "text");
}

TEST_CASE("Kimi K2 chat format matches the K2-Instruct template", "[text]") {
  ByteTokenizer t({"<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>", "[EOS]"});
  REQUIRE(detect_chat_style(t) == ChatStyle::KimiK2);
  const auto ids = encode_segments(t, render_chat(ChatStyle::KimiK2, {{"user", "Hi <|im_end|>"}}, true));
  CHECK(rendered(t, ids) ==
        "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>"
        "<|im_user|>user<|im_middle|>Hi <|im_end|><|im_end|><|im_assistant|>assistant<|im_middle|>");
  // User text is never parsed for control tokens: "<|im_end|>" inside it stays bytes.
  CHECK(std::count(ids.begin(), ids.end(), *t.special_id("<|im_end|>")) == 2);
  CHECK(chat_stop_ids(ChatStyle::KimiK2, t) == std::vector<int32_t>{256, 261});
}

TEST_CASE("Kimi K3 XTML chat format", "[text]") {
  ByteTokenizer t({"<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"});
  REQUIRE(detect_chat_style(t) == ChatStyle::KimiK3);
  const auto ids = encode_segments(
      t, render_chat(ChatStyle::KimiK3, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "?"}}, true));
  CHECK(rendered(t, ids) ==
        "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>think<|sep|>"
        "<|open|>response<|sep|>Hello<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>?<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>");
}

TEST_CASE("sampling filters: temperature, top-k, top-p, min-p", "[text]") {
  const std::vector<float> logits{std::log(1.0f), std::log(2.0f), std::log(4.0f), std::log(8.0f)};  // p = 1,2,4,8 / 15
  auto dist = [&](SamplerOptions o) { return Sampler(o).distribution(logits); };
  SamplerOptions o;
  o.temperature = 1.0f;
  auto p = dist(o);
  CHECK(p[3] == Approx(8.0 / 15));
  CHECK(p[0] == Approx(1.0 / 15));
  o.top_k = 2;
  p = dist(o);
  CHECK(p[3] == Approx(8.0 / 12));
  CHECK(p[1] == 0.0);
  o.top_k = 0;
  o.top_p = 0.6f;  // 8/15 = 0.533 < 0.6, so the second token is needed too
  p = dist(o);
  CHECK(p[2] == Approx(4.0 / 12));
  CHECK(p[1] == 0.0);
  o.top_p = 1.0f;
  o.min_p = 0.2f;  // keep p >= 0.2 * 8/15: tokens with 2, 4 and 8
  p = dist(o);
  CHECK(p[0] == 0.0);
  CHECK(p[1] == Approx(2.0 / 14));
  o.min_p = 0.0f;
  o.temperature = 0.5f;  // p ~ 1,4,16,64
  p = dist(o);
  CHECK(p[3] == Approx(64.0 / 85));
  // Draws follow the distribution and a seed reproduces them.
  o.seed = 7;
  Sampler a(o), b(o);
  std::vector<int> counts(4);
  for (int i = 0; i < 20000; ++i) {
    const int32_t x = a.sample(logits);
    CHECK(x == b.sample(logits));
    ++counts[x];
  }
  double chi2 = 0;
  for (int i = 0; i < 4; ++i) chi2 += std::pow(counts[i] - 20000 * p[i], 2) / (20000 * p[i]);
  CHECK(chi2 < 16.27);  // p = 0.001 at 3 degrees of freedom
}
