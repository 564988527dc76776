// Issue 16 item 7: compute and reads overlap. The routed experts run in the order their reads
// land, and the logits stay bit-identical to a run whose experts arrive in another order (one
// drive or three, pieces of 4 KiB, any read depth, any thread count, budgets from one expert up,
// lookahead on or off). The receipt's overlap line (--stats, --stats-json) reports the decode's
// compute and I/O time, their maximum (the bound) and the fraction of it reached.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <deltafin/engine.hpp>

#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace deltafin;
using test::run_deltafin;

namespace {

// A copy of a fixture model with its experts placed on `drives` drives.
struct Placed {
  fs::path root;
  std::string model, manifest;
  Placed(const std::string& fixture, int drives) {
    root = fs::temp_directory_path() / ("deltafin-overlap-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::remove_all(root);
    fs::create_directories(root);
    fs::copy(test::fixture(fixture), root / "model");
    model = (root / "model").string();
    manifest = (root / "placement.json").string();
    std::string args = "place -m " + model + " --out " + manifest;
    for (int d = 0; d < drives; ++d) {
      fs::path drive = root / "d";
      drive += std::to_string(d);
      fs::create_directories(drive);
      args += " --drive " + drive.string();
    }
    const auto r = run_deltafin(args);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }
  ~Placed() { fs::remove_all(root); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

std::vector<float> logits(const std::string& model, const std::string& placement, int threads, double cache_gb,
                          int io_depth, double piece_mb, bool lookahead) {
  EngineOptions o;
  o.model_dir = model;
  o.placement = placement;
  o.threads = threads;
  o.cache_gb = cache_gb;
  o.cache_gb_given = true;
  o.io_depth = io_depth;
  o.io_piece_mb = piece_mb;
  o.lookahead = lookahead;
  o.chunk = 3;
  auto engine = Engine::open(o);
  auto session = engine->new_session();
  return session->append(test::read_golden(model).all(), true);
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double number(simdjson::dom::element e, const char* key) { return static_cast<double>(e[key]); }

}  // namespace

TEST_CASE("experts run as their reads land and the logits stay bit-identical", "[exactness][overlap]") {
  for (const char* fixture : {"k3_tiny_mxfp4", "k2_tiny_int4"}) {
    INFO(fixture);
    Placed one(fixture, 1), three(fixture, 3);
    const auto reference = logits(one.model, "none", 1, 1.0, 1, 1.0, false);  // shards, one read at a time
    for (const Placed* p : {&one, &three}) {
      INFO(p->manifest);
      CHECK(bit_identical(reference, logits(p->model, p->manifest, 2, 1.0, 8, 1.0, false)));
      CHECK(bit_identical(reference, logits(p->model, p->manifest, 3, 1.0, 8, 0.004, false)));  // pieces land out of order
      CHECK(bit_identical(reference, logits(p->model, p->manifest, 2, 0.0001, 3, 0.004, true)));
      CHECK(bit_identical(reference, logits(p->model, p->manifest, 1, 0.0000123, 8, 0.004, false)));  // about one expert
    }
  }
}

TEST_CASE("the receipt reports the decode's compute, I/O, bound and the fraction of the bound reached", "[overlap]") {
  Placed placed("k3_tiny_mxfp4", 2);
  const fs::path json = placed.root / "stats.json";
  const std::string prompt = test::join_ids(test::read_golden(placed.model).prompt, ",");
  const auto r = run_deltafin("run -m " + placed.model + " --placement " + placed.manifest + " --tokens " + prompt +
                              " -n 12 --ignore-eos --ids --cache-gb 0.0001 --stats=full --stats-json " + json.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("overlap   decode ") != std::string::npos);
  CHECK(r.output.find("% of that reached") != std::string::npos);
  simdjson::dom::parser parser;
  const simdjson::dom::element stats = parser.load(json.string());
  const simdjson::dom::element o = stats["overlap"];
  const double wall = number(o, "decode_seconds"), wait = number(o, "read_wait_seconds"),
               compute = number(o, "compute_seconds"), io = number(o, "io_seconds"), bound = number(o, "bound_seconds"),
               fraction = number(o, "fraction");
  CAPTURE(wall, wait, compute, io, bound, fraction);
  CHECK(std::fabs(wall - number(stats["decode"], "seconds")) < 1e-5);
  CHECK(wall > 0);
  CHECK(wait >= 0);
  CHECK(compute > 0);
  CHECK(std::fabs(compute + wait - wall) < 1e-5);
  CHECK(io > 0);  // a budget of a few experts reads during the decode
  CHECK(io <= wall + 1e-5);
  CHECK(bound >= compute);
  CHECK(bound >= io);
  CHECK(bound == std::max(compute, io));
  CHECK(fraction > 0);
  CHECK(fraction <= 1);
  CHECK(std::fabs(fraction - bound / wall) < 1e-3);  // printed to 6 decimals; the decode is tens of ms
  // The busiest drive is one of the placement's, and its decode busy time is the I/O time.
  const std::string busiest{std::string_view(o["busiest_drive"])};
  bool found = false;
  for (simdjson::dom::element d : stats["drives"].get_array())
    if (std::string_view(d["path"]) == busiest) {
      found = true;
      CHECK(std::fabs(number(d, "decode_busy_seconds") - io) < 1e-3);
    }
  CHECK(found);
}
