// `deltafin tokenize -m DIR` (text on stdin -> ids on stdout, space-separated) and
// `deltafin detokenize -m DIR` (ids on stdin, separated by spaces, commas or newlines -> text).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>

#include "cli/commands.hpp"
#include "text/tokenizer.hpp"
#include "util/error.hpp"

namespace deltafin::cli {

Command register_tokenize(CLI::App& app) {
  struct Flags {
    std::string dir;
    bool no_special = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* sub = app.add_subcommand("tokenize", "Text on stdin to token ids on stdout");
  sub->add_option("-m,--model", f->dir, "Model directory (its tokenizer; default: the bundled model)");
  sub->add_flag("--no-special", f->no_special, "Encode special-token text as ordinary text");
  return {sub, [f] {
            const auto tokenizer = load_tokenizer(model_dir_or_default(f->dir));
            const std::string text(std::istreambuf_iterator<char>(std::cin), {});
            const std::vector<int32_t> ids = tokenizer->encode(text, !f->no_special);
            std::string out;
            for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
            std::printf("%s\n", out.c_str());
            return 0;
          }};
}

Command register_detokenize(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("detokenize", "Token ids on stdin to text on stdout");
  sub->add_option("-m,--model", *dir, "Model directory (its tokenizer; default: the bundled model)");
  return {sub, [dir] {
            const auto tokenizer = load_tokenizer(model_dir_or_default(*dir));
            std::string input(std::istreambuf_iterator<char>(std::cin), {});
            for (char& c : input)
              if (c == ',' || c == '\n' || c == '\r' || c == '\t') c = ' ';
            std::vector<int32_t> ids;
            for (size_t i = 0; i < input.size();) {
              const size_t j = std::min(input.find(' ', i), input.size());
              if (j > i) {
                const std::vector<int32_t> one = parse_token_list(input.substr(i, j - i), "stdin");
                if (one[0] >= tokenizer->vocab_size())
                  fail("stdin: token id {} is outside the vocabulary (0..{})", one[0], tokenizer->vocab_size() - 1);
                ids.push_back(one[0]);
              }
              i = j + 1;
            }
            const std::string text = tokenizer->decode(ids);  // the exact bytes, so detokenize inverts tokenize
            std::fwrite(text.data(), 1, text.size(), stdout);
            return 0;
          }};
}

}  // namespace deltafin::cli
