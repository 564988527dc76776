// `deltafin logits -m DIR --tokens 1,17,300 --out FILE.npy`: float32 logits [T, vocab] of every
// position, in one prefill (in passes the memory plan sizes, at most --chunk positions).
#include <memory>

#include "cli/commands.hpp"
#include "util/atomic_file.hpp"
#include "util/npy.hpp"

namespace deltafin::cli {

Command register_logits(CLI::App& app) {
  struct Flags {
    EngineOptions engine;
    std::string tokens, out;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* sub = app.add_subcommand("logits", "Write the logits of every position to a .npy file");
  add_engine_flags(*sub, flags->engine);
  sub->add_option("--tokens", flags->tokens, "Comma-separated token ids")->required();
  sub->add_option("--out", flags->out, "Output .npy file (float32, shape [T, vocab]; - for stdout)")->required();
  return {sub, [flags] {
            const std::vector<int32_t> ids = parse_token_list(flags->tokens, "--tokens");
            flags->engine.model_dir = model_dir_or_default(flags->engine.model_dir);
            if (expert_host_rank()) return serve_expert_host(flags->engine);
            OutputFile out(flags->out);  // before the run: a wrong directory fails at once
            flags->engine.positions = static_cast<int64_t>(ids.size());
            auto engine = Engine::open(flags->engine);
            auto session = engine->new_session();
            const std::vector<float> logits = session->append(ids, true);
            out.write(npy_f32_bytes({static_cast<int64_t>(ids.size()), engine->summary().vocab_size}, logits.data()));
            return 0;
          }};
}

}  // namespace deltafin::cli
