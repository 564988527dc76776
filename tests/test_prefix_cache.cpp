// The persistent prefix cache wired into the engine (issue 36 item 3): Session::save_state /
// load_state give logits bit-identical to a fresh prefill (K2 and K3 fixtures, the bundled
// model, every backend present), greedy ids equal the transformers goldens after a restore,
// damaged / truncated / foreign entries are ignored with one warning, the budget evicts, and
// `deltafin run --prefix-cache` (twice, continued, by several processes at once, bad DIR).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>
#include <deltafin/error.hpp>

#include <deltafin/error.hpp>

#include "decode/prefix_cache.hpp"
#include "io/prefix_entry.hpp"
#include "io/prefix_store.hpp"
#include "prefix_test_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace deltafin;

namespace {

const std::string kBundled = test::fixtures_dir() + "/../../models/default";

using test::LogCapture;
using test::TempDir;

std::unique_ptr<Engine> open_engine(const std::string& dir, const std::string& backend = "cpu", int64_t chunk = 3) {
  EngineOptions o;
  o.model_dir = dir;
  o.backend = backend;
  o.chunk = chunk;
  return Engine::open(o);
}

bool same_floats(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// Greedy ids from a session holding prompt[0 .. held): the rest of the prompt, then `n` tokens.
std::vector<int32_t> greedy_after(Session& session, const std::vector<int32_t>& prompt, int64_t held, size_t n) {
  std::vector<float> last = session.append(std::span<const int32_t>(prompt).subspan(held), false);
  std::vector<int32_t> out;
  while (out.size() < n) {
    out.push_back(static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    last = session.append(std::span<const int32_t>(&out.back(), 1), false);
  }
  return out;
}

// The logits of every position after `cut`, from a session that loaded the state another saved
// at `cut`, equal a fresh prefill's bit for bit; the bytes saved after a rewind to `cut` (K3: with
// a replay pending) are the same bytes; a session that held something else loads them as well.
void check_identity(const std::string& dir, const std::string& backend, const std::vector<int32_t>& ids, int64_t cut) {
  INFO(dir << " on " << backend << ", cut at " << cut);
  auto engine = open_engine(dir, backend);
  const int64_t vocab = engine->summary().vocab_size;
  const std::vector<float> expected = engine->new_session()->append(ids, true);
  const std::span<const int32_t> head = std::span<const int32_t>(ids).first(cut), tail = std::span<const int32_t>(ids).subspan(cut);

  auto saver = engine->new_session();
  saver->append(head, false);
  const std::vector<std::byte> state = saver->save_state();

  auto loader = engine->new_session();
  loader->load_state(head, state);
  CHECK(loader->position() == cut);
  const std::vector<float> got = loader->append(tail, true);
  CHECK(same_floats(got, std::span<const float>(expected).subspan(cut * vocab)));

  auto rewound = engine->new_session();
  for (size_t at = 0; at < ids.size(); at += 4) rewound->append(std::span<const int32_t>(ids).subspan(at, std::min<size_t>(4, ids.size() - at)), false);
  rewound->rewind(cut);
  CHECK(rewound->save_state() == state);

  auto reused = engine->new_session();
  reused->append(std::vector<int32_t>(ids.rbegin(), ids.rend()), false);
  reused->load_state(head, state);
  CHECK(same_floats(reused->append(tail, true), std::span<const float>(expected).subspan(cut * vocab)));
  // After a load, rewinding (K3: replaying from the start, no snapshot survives a load) is exact too.
  reused->rewind(cut / 2);
  CHECK(same_floats(reused->append(std::span<const int32_t>(ids).subspan(cut / 2), true),
                    std::span<const float>(expected).subspan((cut / 2) * vocab)));
}

std::vector<std::string> backends_present() {
  std::vector<std::string> names = {"cpu"};
  for (const std::string& name : test::device_backends()) names.push_back(name);
  return names;
}

}  // namespace

TEST_CASE("a loaded session state continues bit-identically to a fresh prefill (K2, K3, the bundled model)", "[prefix-cache]") {
  for (const std::string& backend : backends_present()) {
    for (const std::string name : {"k2_tiny", "k3_tiny"}) {
      const std::vector<int32_t> ids = test::read_golden(test::fixture(name)).all();
      for (const int64_t cut : {int64_t{1}, int64_t{7}, static_cast<int64_t>(ids.size()) - 1})
        check_identity(test::fixture(name), backend, ids, cut);
    }
    const std::vector<int32_t> ids = test::read_golden(kBundled + "/golden").all();
    check_identity(kBundled, backend, ids, 5);
  }
}

TEST_CASE("load_state refuses bytes that do not fit the engine, in one line, and leaves the session as it was", "[prefix-cache]") {
  auto k2 = open_engine(test::fixture("k2_tiny"));
  auto k3 = open_engine(test::fixture("k3_tiny"));
  const std::vector<int32_t> ids = test::read_golden(test::fixture("k2_tiny")).all();
  const std::span<const int32_t> head = std::span<const int32_t>(ids).first(6);
  auto s2 = k2->new_session();
  s2->append(head, false);
  const std::vector<std::byte> state = s2->save_state();
  auto bundled = open_engine(kBundled);
  auto check_refused = [&](Engine& engine, std::span<const int32_t> tokens, std::span<const std::byte> bytes, const std::string& part) {
    auto session = engine.new_session();
    session->append(std::span<const int32_t>(ids).first(3), false);
    try {
      session->load_state(tokens, bytes);
      FAIL("accepted: " << part);
    } catch (const Error& e) {
      const std::string message = e.what();
      INFO(message);
      CHECK(message.find(part) != std::string::npos);
      CHECK(message.find('\n') == std::string::npos);
    }
    CHECK(session->position() == 3);
  };
  check_refused(*k3, head, state, "kimi_k2 model");                 // another family
  check_refused(*bundled, head, state, "shape value");               // same family, other shapes
  check_refused(*k2, std::span<const int32_t>(ids).first(5), state, "holds 6 positions");
  check_refused(*k2, head, std::span<const std::byte>(state).first(state.size() - 4), "payload bytes");
  check_refused(*k2, head, std::span<const std::byte>(state).first(10), "not a deltafin session state");
  // The fingerprints tell the models apart, and a thread count does not change them.
  CHECK(k2->state_fingerprint() != k3->state_fingerprint());
  CHECK(k2->state_fingerprint() != bundled->state_fingerprint());
  EngineOptions o;
  o.model_dir = test::fixture("k2_tiny");
  o.threads = 1;
  CHECK(Engine::open(o)->state_fingerprint() == k2->state_fingerprint());
}

TEST_CASE("after a restore from the prefix cache, greedy ids equal the transformers goldens", "[prefix-cache]") {
  for (const std::string& dir : {test::fixture("k2_tiny"), test::fixture("k3_tiny"), kBundled}) {
    INFO(dir);
    const test::Golden golden = test::read_golden(fs::exists(dir + "/golden") ? dir + "/golden" : dir);
    auto engine = open_engine(dir);
    TempDir cache_dir("golden");
    PrefixCache cache(cache_dir.str(), 1, *engine);
    const int64_t cut = static_cast<int64_t>(golden.prompt.size()) / 2;
    auto first = engine->new_session();
    first->append(std::span<const int32_t>(golden.prompt).first(cut), false);
    cache.save(*first, std::span<const int32_t>(golden.prompt).first(cut));
    auto second = engine->new_session();
    CHECK(cache.restore(*second, golden.prompt) == cut);
    CHECK(greedy_after(*second, golden.prompt, cut, golden.generated.size()) == golden.generated);
    // The whole prompt saved: K2 (append-only) restores all but its last position, K3 the longest shorter entry.
    auto third = engine->new_session();
    third->append(golden.prompt, false);
    cache.save(*third, golden.prompt);
    auto fourth = engine->new_session();
    const int64_t hit = cache.restore(*fourth, golden.prompt);
    CHECK(hit == (engine->summary().append_only_state ? static_cast<int64_t>(golden.prompt.size()) - 1 : cut));
    CHECK(greedy_after(*fourth, golden.prompt, hit, golden.generated.size()) == golden.generated);
    const PrefixCacheStats s = cache.stats();
    CHECK(s.hits == 2);
    CHECK(s.positions_saved == static_cast<uint64_t>(cut + hit));
    CHECK(s.saves == 2);
    CHECK(s.ignored == 0);
  }
}

TEST_CASE("a damaged, truncated or foreign prefix cache entry is ignored with one warning and never loaded", "[prefix-cache]") {
  const std::vector<int32_t> ids = test::read_golden(test::fixture("k2_tiny")).all();
  const std::span<const int32_t> head = std::span<const int32_t>(ids).first(8);
  auto k2 = open_engine(test::fixture("k2_tiny"));
  auto k3 = open_engine(test::fixture("k3_tiny"));
  TempDir dir("bad");
  auto save_k2 = [&] {
    PrefixCache cache(dir.str(), 1, *k2);
    auto s = k2->new_session();
    s->append(head, false);
    cache.save(*s, head);
    return (dir.path / PrefixStore(dir.str(), 1, k2->state_fingerprint(), kPrefixStateFormat).entry_name(head)).string();
  };
  auto expect_ignored = [&](Engine& engine, const std::string& what) {
    INFO(what);
    PrefixCache cache(dir.str(), 1, engine);
    LogCapture log;
    auto s = engine.new_session();
    CHECK(cache.restore(*s, ids) == 0);
    CHECK(s->position() == 0);
    CHECK(log.lines() == 1);
    CHECK(log.text.str().find(what) != std::string::npos);
    CHECK(cache.stats().ignored == 1);
    CHECK(cache.stats().hits == 0);
  };
  {
    const std::string entry = save_k2();
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(entry) / 2));
    f.put('\x5a');
  }
  expect_ignored(*k2, "checksum");
  fs::resize_file(save_k2(), 100);
  expect_ignored(*k2, "truncated");
  // K2's entry under the name K3's prompt would have: another model's, left alone.
  const std::string k2_entry = save_k2();
  const fs::path as_k3 = dir.path / PrefixStore(dir.str(), 1, k3->state_fingerprint(), kPrefixStateFormat).entry_name(head);
  fs::copy_file(k2_entry, as_k3);
  expect_ignored(*k3, "another model");
  CHECK(fs::exists(as_k3));
  // A K2 state checksummed under K3's fingerprint (another build would write such): the session refuses it.
  fs::remove(as_k3);
  {
    auto s = k2->new_session();
    s->append(head, false);
    PrefixStore(dir.str(), 1 << 30, k3->state_fingerprint(), kPrefixStateFormat).put(head, s->save_state());
  }
  expect_ignored(*k3, "kimi_k2 model");
}

TEST_CASE("the prefix cache keeps its byte budget, evicting the least recently used entries", "[prefix-cache]") {
  const std::vector<int32_t> ids = test::read_golden(test::fixture("k3_tiny")).all();
  auto engine = open_engine(test::fixture("k3_tiny"));
  TempDir dir("budget");
  uint64_t entry_bytes = 0;
  {
    TempDir probe("probe");
    PrefixCache cache(probe.str(), 1, *engine);
    auto s = engine->new_session();
    s->append(std::span<const int32_t>(ids).first(10), false);
    cache.save(*s, std::span<const int32_t>(ids).first(10));
    for (const auto& e : fs::directory_iterator(probe.path)) entry_bytes = fs::file_size(e.path());
  }
  REQUIRE(entry_bytes > 0);
  // Room for two entries of about this size, not three.
  PrefixCache cache(dir.str(), 2.5 * static_cast<double>(entry_bytes) / 1e9, *engine);
  auto s = engine->new_session();
  for (const int64_t n : {10, 11, 12, 13}) {
    s->append(std::span<const int32_t>(ids).subspan(s->position(), n - s->position()), false);
    cache.save(*s, std::span<const int32_t>(ids).first(n));
  }
  const PrefixCacheStats stats = cache.stats();
  CHECK(stats.saves == 4);
  CHECK(stats.evictions == 2);
  uint64_t used = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) used += fs::file_size(e.path());
  CHECK(used <= static_cast<uint64_t>(2.5 * static_cast<double>(entry_bytes)));
  auto t = engine->new_session();
  CHECK(cache.restore(*t, std::span<const int32_t>(ids).first(14)) == 13);
  auto u = engine->new_session();
  CHECK(cache.restore(*u, std::span<const int32_t>(ids).first(12)) == 0);  // 10 and 11 were evicted
}

TEST_CASE("deltafin run --prefix-cache: a second run of a prompt hits and prints the same text", "[prefix-cache]") {
  TempDir dir("cli"), outputs("cli-out");
  fs::create_directories(outputs.path);
  const std::string args = "run -m " + kBundled + " -p 'def _check_methods(C, *methods):' -n 16 --temp 0 --prefix-cache " + dir.str();
  const auto first = test::run_deltafin(args + " --stats-json " + (outputs.path / "first.json").string());
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const auto second = test::run_deltafin(args + " --stats");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK(second.output.starts_with(first.output));
  test::check_contains(second.output, "prefix    hit ");
  std::ifstream in(outputs.path / "first.json");
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  test::check_contains(json, "\"prefix_cache\": {\"hit_positions\": 0, \"hits\": 0");
  test::check_contains(json, "\"saves\": 2");  // after the prompt and after the answer
  const auto third = test::run_deltafin(args + " --stats-json " + (outputs.path / "third.json").string());
  CHECK(third.output == first.output);
  std::ifstream in3(outputs.path / "third.json");
  const std::string json3((std::istreambuf_iterator<char>(in3)), std::istreambuf_iterator<char>());
  CHECK(json3.find("\"hit_positions\": 0,") == std::string::npos);
  test::check_contains(json3, "\"hits\": 1");
}

TEST_CASE("deltafin run --prefix-cache on K3: a repeated and a continued prompt restore, ids equal the goldens", "[prefix-cache]") {
  TempDir dir("cli-k3");
  const std::string model = test::fixture("k3_tiny");
  const test::Golden golden = test::read_golden(model);
  const size_t half = golden.generated.size() / 2;
  const std::string base = "run -m " + model + " --temp 0 --ids --ignore-eos --chunk 3 --prefix-cache " + dir.str();
  const std::string prompt = " --tokens " + test::join_ids(golden.prompt, ",");
  const std::vector<int32_t> first_half(golden.generated.begin(), golden.generated.begin() + static_cast<std::ptrdiff_t>(half));
  // Turn 1: the prompt and half the answer. The prompt's state is saved at all but its last
  // position (a recurrent state serves only its own length), the answer's after it.
  const auto first = test::run_deltafin(base + prompt + " -n " + std::to_string(half) + " --stats");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(first.output.starts_with(test::join_ids(first_half, " ") + "\n"));
  test::check_contains(first.output, "prompt    " + std::to_string(golden.prompt.size()) + " tokens");
  test::check_contains(first.output, "saved 2 entries");
  // The same prompt again loads all but its last position.
  const auto again = test::run_deltafin(base + prompt + " -n " + std::to_string(half) + " --stats");
  INFO(again.output);
  CHECK(again.output.starts_with(test::join_ids(first_half, " ") + "\n"));
  test::check_contains(again.output, "prefix    hit " + std::to_string(golden.prompt.size() - 1) + " positions");
  test::check_contains(again.output, "nothing new to save");
  // Turn 2 continues turn 1: the rest of the answer equals the goldens.
  std::vector<int32_t> continued = golden.prompt;
  continued.insert(continued.end(), first_half.begin(), first_half.end());
  const auto second = test::run_deltafin(base + " --tokens " + test::join_ids(continued, ",") + " -n " +
                                         std::to_string(golden.generated.size() - half) + " --stats");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  const std::vector<int32_t> rest(golden.generated.begin() + static_cast<std::ptrdiff_t>(half), golden.generated.end());
  CHECK(second.output.starts_with(test::join_ids(rest, " ") + "\n"));
  test::check_contains(second.output, "prefix    hit " + std::to_string(continued.size() - 1) + " positions");
}

TEST_CASE("several processes running on one prefix cache directory leave every entry intact", "[prefix-cache]") {
  TempDir dir("concurrent");
  const std::string model = test::fixture("k2_tiny");
  const test::Golden golden = test::read_golden(model);
  // Four runs at once, with prompts that share prefixes, so they write and evict the same entries.
  std::string script;
  for (int p = 0; p < 4; ++p) {
    const std::vector<int32_t> prompt(golden.prompt.begin(), golden.prompt.begin() + static_cast<std::ptrdiff_t>(golden.prompt.size() - p % 2));
    script += "DELTAFIN_SIMD=" + cpu::simd_current() + " " + test::binary() + " run -m " + model + " --tokens " +
              test::join_ids(prompt, ",") + " -n 6 --temp 0 --ids --ignore-eos --threads 1 --prefix-cache " + dir.str() +
              " --prefix-cache-gb 0.00002 > " + (dir.path / ("out" + std::to_string(p))).string() + " 2>&1 & ";
  }
  fs::create_directories(dir.path);
  const auto r = test::run_command("sh -c '" + script + "wait'");
  CHECK(r.exit_code == 0);
  int entries = 0;
  uint64_t used = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("out")) {
      std::ifstream in(e.path());
      const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      INFO(name << ": " << out);
      CHECK(out.find("warn") == std::string::npos);
      CHECK(std::count(out.begin(), out.end(), '\n') == 1);
      continue;
    }
    INFO(name);
    CHECK(e.path().extension() == ".dpc");  // no temporaries left
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK_NOTHROW(parse_prefix_entry(std::as_bytes(std::span<const char>(bytes))));
    ++entries, used += bytes.size();
  }
  CHECK(entries >= 1);
  CHECK(used <= 20'000);  // the budget held: the four runs' entries (about 32 KB) did not all fit
  // Whatever is left serves a later run, whose ids are the goldens'.
  const auto after = test::run_deltafin("run -m " + model + " --tokens " + test::join_ids(golden.prompt, ",") + " -n " +
                                        std::to_string(golden.generated.size()) + " --temp 0 --ids --ignore-eos --prefix-cache " + dir.str());
  CHECK(after.output == test::join_ids(golden.generated, " ") + "\n");
}

TEST_CASE("deltafin run --prefix-cache: a bad directory or budget is one line naming the flag, exit 1, nothing replaced", "[prefix-cache]") {
  TempDir dir("cli-bad");
  fs::create_directories(dir.path);
  const fs::path file = dir.path / "a-file";
  std::ofstream(file) << "keep me";
  auto expect_refused = [&](const std::string& flags, const std::string& part) {
    const auto r = test::run_deltafin("run -m " + kBundled + " -p hi -n 2 " + flags);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.rfind("deltafin: ", 0) == 0);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    test::check_contains(r.output, part);
  };
  expect_refused("--prefix-cache " + file.string(), "--prefix-cache " + file.string() + ": not a directory");
  expect_refused("--prefix-cache " + (file / "sub").string(), "--prefix-cache " + (file / "sub").string() + ": cannot create");
  expect_refused("--prefix-cache " + (dir.path / "c").string() + " --prefix-cache-gb 0", "--prefix-cache-gb");
  expect_refused("--prefix-cache-gb 2", "--prefix-cache");
  std::ifstream in(file);
  CHECK(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()) == "keep me");
  if (::geteuid() != 0) {  // root writes anywhere
    const fs::path locked = dir.path / "locked";
    fs::create_directories(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    expect_refused("--prefix-cache " + locked.string(), "not writable");
    fs::permissions(locked, fs::perms::owner_all);
  }
}
