# The libFuzzer targets, each with its seed corpus (tests/fuzz/<CORPUS>), the sources it tests and
# the libraries they need. deltafin_fuzzer(NAME CORPUS DIR SOURCES ... [LIBS ...] [DEFINES ...])
# is defined by the includer:
#   tests/fuzz/CMakeLists.txt  fuzz_NAME with libFuzzer and the sanitizers (scripts/fuzz.sh runs them);
#   tests/CMakeLists.txt       fuzz_seeds_NAME with the default compiler and seed_driver.cpp, a
#                              default-suite test that runs the target once over each of its seeds:
#                              every target builds and passes its seeds on every test run.
set(DELTAFIN_FUZZ_SRC ${PROJECT_SOURCE_DIR}/src)
set(DELTAFIN_TEXT_SOURCES ${DELTAFIN_FUZZ_SRC}/text/hf_bpe_loader.cpp ${DELTAFIN_FUZZ_SRC}/text/hf_bpe_tokenizer.cpp
    ${DELTAFIN_FUZZ_SRC}/text/tiktoken_tokenizer.cpp)
deltafin_fuzzer(safetensors CORPUS corpus
                SOURCES ${DELTAFIN_FUZZ_SRC}/weights/safetensors.cpp ${DELTAFIN_FUZZ_SRC}/weights/dtype.cpp)
deltafin_fuzzer(config CORPUS config-corpus
                SOURCES ${DELTAFIN_FUZZ_SRC}/weights/model_config.cpp ${DELTAFIN_FUZZ_SRC}/weights/k3_config.cpp
                        ${DELTAFIN_FUZZ_SRC}/weights/dspark_config.cpp ${DELTAFIN_FUZZ_SRC}/weights/eagle3_config.cpp
                        ${DELTAFIN_FUZZ_SRC}/weights/pass_activations.cpp)
deltafin_fuzzer(placement CORPUS placement-corpus
                SOURCES ${DELTAFIN_FUZZ_SRC}/weights/placement.cpp ${DELTAFIN_FUZZ_SRC}/weights/expert_record.cpp
                        ${DELTAFIN_FUZZ_SRC}/weights/dtype.cpp)
deltafin_fuzzer(tokenizer_json CORPUS tokenizer-json-corpus SOURCES ${DELTAFIN_TEXT_SOURCES}
                LIBS PkgConfig::PCRE2 PkgConfig::ICU)
deltafin_fuzzer(tiktoken_ranks CORPUS tiktoken-corpus SOURCES ${DELTAFIN_TEXT_SOURCES}
                LIBS PkgConfig::PCRE2 PkgConfig::ICU)
deltafin_fuzzer(encode CORPUS encode-corpus SOURCES ${DELTAFIN_TEXT_SOURCES} ${DELTAFIN_FUZZ_SRC}/text/chat_format.cpp
                ${DELTAFIN_FUZZ_SRC}/text/chat_format_k2.cpp ${DELTAFIN_FUZZ_SRC}/text/chat_format_k3.cpp
                ${DELTAFIN_FUZZ_SRC}/text/chat_format_deepseek.cpp ${DELTAFIN_FUZZ_SRC}/util/json_value.cpp
                LIBS PkgConfig::PCRE2 PkgConfig::ICU DEFINES DELTAFIN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
deltafin_fuzzer(http_head CORPUS http-head-corpus SOURCES ${DELTAFIN_FUZZ_SRC}/serve/http_request_head.cpp)
deltafin_fuzzer(request CORPUS request-corpus SOURCES ${DELTAFIN_FUZZ_SRC}/serve/request.cpp ${DELTAFIN_FUZZ_SRC}/serve/chat_request.cpp
                ${DELTAFIN_FUZZ_SRC}/util/json_value.cpp)
deltafin_fuzzer(hosts_wire CORPUS hosts-wire-corpus SOURCES ${DELTAFIN_FUZZ_SRC}/hosts/wire.cpp)
deltafin_fuzzer(prefix_entry CORPUS prefix-entry-corpus
                SOURCES ${DELTAFIN_FUZZ_SRC}/io/prefix_entry.cpp)
deltafin_fuzzer(state_bytes CORPUS state-bytes-corpus
                SOURCES ${DELTAFIN_FUZZ_SRC}/model/state_bytes.cpp)
deltafin_fuzzer(reply_parser CORPUS reply-parser-corpus
                SOURCES ${DELTAFIN_FUZZ_SRC}/text/reply_parser.cpp ${DELTAFIN_FUZZ_SRC}/util/json_value.cpp)
deltafin_fuzzer(json_schema CORPUS json-schema-corpus
                SOURCES ${DELTAFIN_FUZZ_SRC}/text/json_schema.cpp ${DELTAFIN_FUZZ_SRC}/text/json_matcher.cpp
                        ${DELTAFIN_FUZZ_SRC}/util/json_value.cpp)
deltafin_fuzzer(routing_trace CORPUS routing-trace-corpus
                SOURCES ${DELTAFIN_FUZZ_SRC}/weights/routing_trace.cpp ${DELTAFIN_FUZZ_SRC}/util/json_value.cpp
                        ${DELTAFIN_FUZZ_SRC}/util/input_file.cpp)
