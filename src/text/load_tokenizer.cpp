// load_tokenizer: picks the tokenizer a model directory ships.
#include <filesystem>

#include "text/hf_bpe_tokenizer.hpp"
#include "text/tiktoken_tokenizer.hpp"
#include "text/tokenizer.hpp"
#include "util/error.hpp"

namespace deltafin {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(model_dir) / "tiktoken.model")) return load_tiktoken_model_dir(model_dir);
  if (fs::exists(fs::path(model_dir) / "tokenizer.json"))
    return load_hf_tokenizer((fs::path(model_dir) / "tokenizer.json").string());
  fail("{}: no tokenizer (tiktoken.model or tokenizer.json); pass --tokens with ids instead", model_dir);
}

}  // namespace deltafin
