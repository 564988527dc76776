// `deltafin inspect --hosts` (issue 35 item 8): the projection of the real Kimi K3 on 1, 2 and 4
// hosts of 128 GB and four 7 GB/s drives equals the hand calculation of docs/hosts-projection.md;
// any model's config gives a projection; bad --hosts and --link values are refused in one line.
#include <catch2/catch.hpp>

#include <algorithm>

#include "test_util.hpp"

using namespace deltafin;

namespace {

const std::string kK3Hosts = "inspect -m " + test::fixture("k3_real_config") + " --memory-gb 128 --drive-gbps 7,7,7,7 --hosts ";

}  // namespace

TEST_CASE("inspect --hosts projects the real Kimi K3 as docs/hosts-projection.md works it out", "[hosts-projection]") {
  const auto one = test::run_deltafin(kK3Hosts + "1");
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  test::check_contains(one.output, "expert cache   rank 0 5.827428 GB of 1446.456066 GB (hit 0.4029%)\n");
  test::check_contains(one.output, "a MoE layer    10.2310 ms");
  test::check_contains(one.output, "an expert 0.6394 ms on rank 0 (a miss read at 28 GB/s, the expert op at 1149 GB/s)");
  test::check_contains(one.output, "spine          85.9409 ms a token on rank 0: 111.160722 GB computed at 1293.5 GB/s");
  test::check_contains(one.output, "projected      0.9735 tok/s (1027.19 ms a token) on one host");

  const auto two = test::run_deltafin(kK3Hosts + "2");
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  test::check_contains(two.output, "hosts          2 x 128.0000 GB with 28 GB/s of drives; the 896 experts of a layer by e % 2: rank 0 448 "
                                   "(and the spine), others 448");
  test::check_contains(two.output, "expert cache   rank 0 5.827428 GB of 723.228033 GB (hit 0.8058%), others 121.331565 GB of "
                                   "723.228033 GB (hit 16.7764%)");
  test::check_contains(two.output, "a MoE layer    5.6880 ms, the busiest host expected under uniform routing (5.0953 ms split evenly); "
                                   "an expert 0.6369 ms on rank 0, 0.5368 ms on the others");
  test::check_contains(two.output, "messages       129548 B a MoE layer");
  test::check_contains(two.output, "link 10gbe     1.25 GB/s, round trip 100 us: 0.2036 ms a MoE layer, 18.7347 ms a token (2.98% of a step)");
  test::check_contains(two.output, "projected      1.5924 tok/s over 10gbe (627.97 ms a token) = 1.64x one host's 0.9735 tok/s; split evenly 1.7439 tok/s");
  test::check_contains(two.output, "link tb5       1.3 GB/s, round trip 300 us: 0.3997 ms a MoE layer");
  test::check_contains(two.output, "(5.69% of a step)");
  test::check_contains(two.output, "projected      1.5480 tok/s over tb5 (646.00 ms a token) = 1.59x one host's 0.9735 tok/s; split evenly 1.6907 tok/s");

  const auto four = test::run_deltafin(kK3Hosts + "4");
  INFO(four.output);
  REQUIRE(four.exit_code == 0);
  test::check_contains(four.output, "(hit 1.6115%), others 121.331565 GB of 361.614017 GB (hit 33.5528%)");
  test::check_contains(four.output, "a MoE layer    3.0766 ms, the busiest host expected under uniform routing (2.5274 ms split evenly); "
                                    "an expert 0.6319 ms on rank 0, 0.4317 ms on the others");
  test::check_contains(four.output, "messages       215950 B a MoE layer: Request, Run and Result with 2.9713 hosts on average");
  test::check_contains(four.output, "0.2728 ms a MoE layer, 25.0939 ms a token (6.37% of a step)");
  test::check_contains(four.output, "projected      2.5376 tok/s over 10gbe (394.08 ms a token) = 2.61x one host's 0.9735 tok/s; split evenly 2.9107 tok/s");
  test::check_contains(four.output, "0.4661 ms a MoE layer, 42.8826 ms a token (10.41% of a step)");
  test::check_contains(four.output, "projected      2.4280 tok/s over tb5 (411.87 ms a token) = 2.49x one host's 0.9735 tok/s; split evenly 2.7674 tok/s");

  // One link, named or stated: 1.25:100 is 10gbe.
  const auto stated = test::run_deltafin(kK3Hosts + "4 --link 1.25:100");
  test::check_contains(stated.output, "projected      2.5376 tok/s over 1.25:100");
  CHECK(stated.output.find("over tb5") == std::string::npos);
  const auto tb5 = test::run_deltafin(kK3Hosts + "4 --link tb5");
  test::check_contains(tb5.output, "projected      2.4280 tok/s over tb5");
  CHECK(tb5.output.find("over 10gbe") == std::string::npos);
}

TEST_CASE("inspect --hosts projects any model's config", "[hosts-projection]") {
  const auto bundled = test::run_deltafin("inspect --memory-gb 1 --drive-gbps 3 --hosts 3 --link 10gbe");
  INFO(bundled.output);
  CHECK(bundled.exit_code == 0);
  test::check_contains(bundled.output, "the 32 experts of a layer by e % 3: rank 0 11 (and the spine), others 10-11");
  test::check_contains(bundled.output, "tok/s over 10gbe");
  // The spine streams at 64 GB: its reads are on rank 0's drives.
  const auto streamed = test::run_deltafin("inspect -m " + test::fixture("k3_real_config") +
                                           " --memory-gb 64 --drive-gbps 7,7,7,7 --hosts 2 --link tb5");
  INFO(streamed.output);
  CHECK(streamed.exit_code == 0);
  test::check_contains(streamed.output, "+ 61.255275 GB streamed from the drives");
}

TEST_CASE("bad --hosts and --link values are refused in one line", "[hosts-projection][bad-input]") {
  const std::string k3 = "inspect -m " + test::fixture("k3_real_config") + " ";
  const std::string plan = "--memory-gb 128 --drive-gbps 7 ";
  const std::pair<std::string, std::string> cases[] = {
      {plan + "--hosts 0", "--hosts must be from 1 to 896 (the routed experts of a layer; got 0)"},
      {plan + "--hosts -2", "--hosts must be from 1 to 896"},
      {plan + "--hosts 897", "--hosts must be from 1 to 896 (the routed experts of a layer; got 897)"},
      {plan + "--hosts two", "--hosts"},
      {plan + "--hosts 2 --link 40gbe", "--link: '40gbe' is not 10gbe, tb5 or GBPS:RTT_US"},
      {plan + "--hosts 2 --link 1.25", "--link: '1.25' is not 10gbe, tb5 or GBPS:RTT_US"},
      {plan + "--hosts 2 --link 1.25:-5", "--link: '1.25:-5' is not"},
      {plan + "--hosts 2 --link :100", "--link: ':100' is not"},
      {plan + "--link tb5", "--link needs --hosts"},
      {"--hosts 2", "--hosts needs --memory-gb and --drive-gbps"},
      {"--memory-gb 128 --hosts 2", "--hosts needs --memory-gb and --drive-gbps"},
      {"--device-memory-gb 80 --drive-gbps 7 --hosts 2", "--hosts projects hosts of one memory pool"},
  };
  for (const auto& [flags, message] : cases) {
    const auto r = test::run_deltafin(k3 + flags);
    INFO(flags << "\n" << r.output);
    CHECK(r.exit_code == 1);
    test::check_contains(r.output, message);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
}
