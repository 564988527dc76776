// Issue 35: the messages between hosts (hosts/wire.hpp) and who owns each expert
// (hosts/expert_owners.hpp). A message encodes and decodes to itself; every truncation and every
// inconsistent shape is refused in one line naming the sender; owners fall over in order.
#include <catch2/catch.hpp>

#include "hosts/expert_owners.hpp"
#include "hosts/wire.hpp"
#include "util/error.hpp"

using namespace deltafin;
using namespace deltafin::hosts;

namespace {

Run sample_run() {
  Run r;
  r.layer = 3, r.n = 2, r.k = 2, r.in = 3, r.width = 4;
  r.act.kind = GatedActivation::kSiTU, r.act.beta = 1.5f, r.act.linear_beta = 0.25f;
  r.experts = {5}, r.all = {1, 5}, r.ids = {1, 5, 5, 1}, r.x = {1, 2, 3, 4, 5, 6};
  return r;
}

}  // namespace

TEST_CASE("hosts wire: every message round-trips", "[hosts]") {
  Result res;
  res.layer = 3, res.in = 3, res.slots = {1, 2}, res.rows = {1, 2, 3, 4, 5, 6}, res.failed = {9}, res.failure = "drive 0 failed";
  res.counters.expert_bytes_read = 123, res.counters.busy_seconds = 0.5;
  const std::vector<Message> messages = {Hello{"v", "host", "model", "shards", "cpu AVX2", ""},
                                         Request{7, {1, 4}, {0, 3}},
                                         sample_run(),
                                         res,
                                         Stop{},
                                         Failure{"it broke"}};
  for (const Message& m : messages) {
    const Bytes b = encode(m);
    const Message back = decode(b, 2);
    CHECK(back.index() == m.index());
    CHECK(encode(back) == b);
  }
  const Run r = std::get<Run>(decode(encode(sample_run()), 1));
  CHECK(r.act.kind == GatedActivation::kSiTU);
  CHECK(r.act.beta == 1.5f);
  CHECK(r.x == std::vector<float>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("hosts wire: truncated and inconsistent messages are refused naming the sender", "[hosts]") {
  const Bytes b = encode(sample_run());
  for (size_t cut = 0; cut < b.size(); ++cut) {
    const Bytes part(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(cut));
    CHECK_THROWS_WITH(decode(part, 4), Catch::Contains("a message from rank 4 is malformed"));
  }
  Bytes longer = b;
  longer.push_back(std::byte{0});
  CHECK_THROWS_WITH(decode(longer, 4), Catch::Contains("1 bytes left over"));
  Run wrong = sample_run();
  wrong.x.pop_back();
  CHECK_THROWS_WITH(decode(encode(wrong), 1), Catch::Contains("carries 4 ids and 5 inputs"));
  wrong = sample_run();
  wrong.experts = {2};
  CHECK_THROWS_WITH(decode(encode(wrong), 1), Catch::Contains("expert 2 is not in its union"));
  wrong = sample_run();
  wrong.all = {5, 1};
  CHECK_THROWS_WITH(decode(encode(wrong), 1), Catch::Contains("not ascending"));
  Result res;
  res.in = 3, res.slots = {0}, res.rows = {1, 2};
  CHECK_THROWS_WITH(decode(encode(res), 1), Catch::Contains("carries 2 values"));
  CHECK_THROWS_WITH(decode(Bytes{std::byte{42}}, 1), Catch::Contains("kind 42 is unknown"));
}

TEST_CASE("hosts: equal shares and falling over to the next host", "[hosts]") {
  ExpertOwners owners = ExpertOwners::equal_shares(3, 2, 8);
  CHECK(owners.owner(0, 0) == 0);
  CHECK(owners.owner(1, 4) == 1);
  CHECK(owners.owner(0, 5) == 2);
  owners.lose(2, 0, 5);
  CHECK(owners.owner(0, 5) == 0);  // the next host in rank order
  CHECK(owners.owner(1, 5) == 2);  // only that layer's expert moved
  owners.lose(0, 0, 5);
  owners.lose(1, 0, 5);
  CHECK(owners.owner(0, 5) == -1);

  ExpertOwners placed(2, 1, 3, {{1}, {0, 1}, {}});
  CHECK(placed.owner(0, 0) == 1);
  CHECK(placed.owner(0, 2) == -1);
  placed.lose(0, 0, 1);
  CHECK(placed.owner(0, 1) == 1);
  CHECK_THROWS_WITH(ExpertOwners(2, 1, 1, {{2}}), Catch::Contains("host 2 of a run of 2 hosts"));
}

TEST_CASE("hosts: a pass's experts go to their preferred holders, evened out where they have several", "[hosts]") {
  // Two hosts that both hold everything (equal shares): experts 0, 2, 4, 6 prefer host 0, but
  // host 0's even share of 4 experts is 2, so 4 and 6 go to host 1.
  const ExpertOwners both = ExpertOwners::equal_shares(2, 1, 8);
  const std::vector<int32_t> pass = {0, 2, 4, 6};
  CHECK(both.balance(0, pass) == std::vector<int>{0, 0, 1, 1});
  const std::vector<int32_t> mixed = {0, 1, 2, 3};
  CHECK(both.balance(0, mixed) == std::vector<int>{0, 1, 0, 1});  // already even: every preferred holder
  // One holder each: nothing to even out.
  const ExpertOwners single(2, 1, 4, {{0}, {0}, {0}, {1}});
  CHECK(single.balance(0, mixed) == std::vector<int>{0, 0, 0, 1});
}
